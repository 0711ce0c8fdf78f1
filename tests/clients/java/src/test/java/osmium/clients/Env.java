package osmium.clients;

import static org.junit.jupiter.api.Assertions.fail;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;

/**
 * What tests/clients/test_java.py tells the suite, and data shared by the cases.
 *
 * <ul>
 *   <li>MEMCACHED_SERVERS: host:port of the server under test (no SASL)
 *   <li>MEMCACHED_KIND: "memcached" or "osmium" (for messages only: every expectation is
 *       memcached 1.6's behaviour)
 *   <li>MEMCACHED_SASL_SERVERS, MEMCACHED_SASL_USER, MEMCACHED_SASL_PASSWORD: a server of the same
 *       kind started with -S and that one user; or MEMCACHED_SASL_ERROR: why it could not be
 *       started
 * </ul>
 */
final class Env {
  private Env() {}

  /** Makes this run's keys unique, so the suite can be rerun against the same server. */
  static final String RUN = Long.toString(System.nanoTime() & 0xffffffffL, 36);

  static final byte[] TRICKY = bytes("a\r\nEND\r\nb\r\nVALUE x 0 1\r\n\r\n\u0000");

  /** Stats every memcached-compatible server reports (tests/clients/helpers.py CORE_STATS). */
  static final List<String> CORE_STATS =
      List.of(
          "pid", "uptime", "time", "version", "curr_connections", "total_connections",
          "cmd_get", "cmd_set", "get_hits", "get_misses", "curr_items", "total_items",
          "bytes", "limit_maxbytes", "threads", "evictions");

  static String require(String name) {
    String v = System.getenv(name);
    if (v == null || v.isEmpty()) {
      fail(name + " is not set (run this suite via tests/clients/test_java.py)");
    }
    return v;
  }

  static String servers() {
    return require("MEMCACHED_SERVERS");
  }

  static String kind() {
    String k = System.getenv("MEMCACHED_KIND");
    return k == null ? "unknown" : k;
  }

  /** host:port of the SASL server; fails the test if none could be started. */
  static String saslServers() {
    String err = System.getenv("MEMCACHED_SASL_ERROR");
    if (err != null && !err.isEmpty()) {
      fail("no SASL server of kind " + kind() + ": " + err);
    }
    return require("MEMCACHED_SASL_SERVERS");
  }

  static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.ISO_8859_1);
  }

  static String str(byte[] b) {
    return b == null ? null : new String(b, StandardCharsets.ISO_8859_1);
  }

  static byte[] allBytes() {
    byte[] b = new byte[256];
    for (int i = 0; i < 256; i++) {
      b[i] = (byte) i;
    }
    return b;
  }

  static byte[] repeat(byte[] unit, int times) {
    byte[] out = new byte[unit.length * times];
    for (int i = 0; i < times; i++) {
      System.arraycopy(unit, 0, out, i * unit.length, unit.length);
    }
    return out;
  }

  static byte[] oneMillionBytes() {
    byte[] v = new byte[1_000_000];
    for (int i = 0; i < v.length; i++) {
      v[i] = (byte) (i % 251);
    }
    return v;
  }

  static byte[] twoMegabytes() {
    byte[] v = new byte[2 * 1024 * 1024];
    Arrays.fill(v, (byte) 'x');
    return v;
  }

  /** prefix + name, padded with 'x' to exactly 250 bytes. */
  static String key250(String prefixed) {
    StringBuilder sb = new StringBuilder(prefixed);
    while (sb.length() < 250) {
      sb.append('x');
    }
    if (sb.length() != 250) {
      throw new IllegalArgumentException("prefix too long: " + prefixed);
    }
    return sb.toString();
  }

  /** Sleep long enough for a ttl-2 item to expire on memcached's 1 s clock. */
  static void sleepPastTtl2() throws InterruptedException {
    Thread.sleep(3100);
  }
}
