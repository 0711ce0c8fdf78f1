package osmium.clients;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.SocketAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import net.spy.memcached.AddrUtil;
import net.spy.memcached.CASResponse;
import net.spy.memcached.CASValue;
import net.spy.memcached.CachedData;
import net.spy.memcached.ConnectionFactoryBuilder;
import net.spy.memcached.ConnectionFactoryBuilder.Protocol;
import net.spy.memcached.FailureMode;
import net.spy.memcached.MemcachedClient;
import net.spy.memcached.internal.OperationFuture;
import net.spy.memcached.transcoders.Transcoder;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * spymemcached cases, run once per protocol by {@link SpyTextTest} and {@link SpyBinaryTest}.
 * Values go through {@link #RAW}, so the server sees exactly the bytes and flags a test chose
 * (spymemcached's default transcoder would gzip values over 16 KB).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
abstract class SpyCases {
  /** Passes bytes and flags through unchanged. */
  static final Transcoder<CachedData> RAW =
      new Transcoder<CachedData>() {
        @Override
        public boolean asyncDecode(CachedData d) {
          return false;
        }

        @Override
        public CachedData encode(CachedData o) {
          return o;
        }

        @Override
        public CachedData decode(CachedData d) {
          return d;
        }

        @Override
        public int getMaxSize() {
          return CachedData.MAX_SIZE;
        }
      };

  abstract Protocol protocol();

  MemcachedClient c;

  /**
   * A client whose connections are up. spymemcached connects in the background, and with
   * FailureMode.Cancel an operation given while its server's connection is not yet up is
   * cancelled at once (a race a loaded machine loses), so this waits until every server is
   * reachable.
   */
  static MemcachedClient connect(Protocol protocol, String servers) throws Exception {
    List<java.net.InetSocketAddress> addresses = AddrUtil.getAddresses(servers);
    return connected(
        new ConnectionFactoryBuilder()
            .setProtocol(protocol)
            .setOpTimeout(10_000)
            .setFailureMode(FailureMode.Cancel)
            .setDaemon(true)
            .build(),
        addresses);
  }

  /** A client of `factory` over `addresses`, once every server is reachable (see connect). */
  static MemcachedClient connected(
      net.spy.memcached.ConnectionFactory factory, List<java.net.InetSocketAddress> addresses)
      throws Exception {
    MemcachedClient client = new MemcachedClient(factory, addresses);
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (client.getAvailableServers().size() < addresses.size()) {
      if (System.nanoTime() > deadline) {
        client.shutdown();
        throw new IllegalStateException("spymemcached did not connect to " + addresses);
      }
      Thread.sleep(5);
    }
    return client;
  }

  @BeforeAll
  void open() throws Exception {
    c = connect(protocol(), Env.servers());
  }

  @AfterAll
  void close() {
    if (c != null) {
      c.shutdown(5, TimeUnit.SECONDS);
    }
  }

  boolean binary() {
    return protocol() == Protocol.BINARY;
  }

  /** This class's key for name: "js" + t|b + run + "_" + name. */
  String k(String name) {
    return "js" + (binary() ? "b" : "t") + Env.RUN + "_" + name;
  }

  static CachedData data(byte[] value, int flags) {
    return new CachedData(flags, value, CachedData.MAX_SIZE);
  }

  boolean set(String key, byte[] value, int flags, int exp) throws Exception {
    try {
      return c.set(key, exp, data(value, flags), RAW).get();
    } catch (ExecutionException e) {
      // In text mode spymemcached drops and reopens a connection after a
      // SERVER_ERROR reply and cancels what was queued on it meanwhile (seen
      // against memcached too): a cancelled set is sent once more.
      if (!(e.getCause() instanceof CancellationException)) {
        throw e;
      }
      return c.set(key, exp, data(value, flags), RAW).get();
    }
  }

  void mustSet(String key, byte[] value) throws Exception {
    assertTrue(set(key, value, 0, 0), "set " + key);
  }

  void mustSet(String key, String value) throws Exception {
    mustSet(key, Env.bytes(value));
  }

  CachedData get(String key) {
    return c.get(key, RAW);
  }

  void wantValue(String key, byte[] want) {
    CachedData d = get(key);
    assertNotNull(d, "get " + key + ": miss");
    assertArrayEquals(want, d.getData(), "get " + key);
  }

  void wantValue(String key, String want) {
    wantValue(key, Env.bytes(want));
  }

  void wantMiss(String key) {
    assertNull(get(key), "get " + key + " should miss");
  }

  @Test
  void setGet() throws Exception {
    mustSet(k("a"), "hello");
    wantValue(k("a"), "hello");
    mustSet(k("a"), "world");
    wantValue(k("a"), "world");
    wantMiss(k("missing"));
    mustSet(k("empty"), "");
    wantValue(k("empty"), "");
    // the default transcoder: a String is stored as its bytes
    assertTrue(c.set(k("str"), 0, "text").get());
    assertEquals("text", c.get(k("str")));
    wantValue(k("str"), "text");
  }

  @Test
  void addReplace() throws Exception {
    assertTrue(c.add(k("add"), 0, data(Env.bytes("1"), 0), RAW).get());
    assertFalse(c.add(k("add"), 0, data(Env.bytes("2"), 0), RAW).get());
    wantValue(k("add"), "1");

    assertFalse(c.replace(k("repl"), 0, data(Env.bytes("1"), 0), RAW).get());
    wantMiss(k("repl"));
    mustSet(k("repl"), "1");
    assertTrue(c.replace(k("repl"), 0, data(Env.bytes("2"), 0), RAW).get());
    wantValue(k("repl"), "2");
  }

  @Test
  void appendPrepend() throws Exception {
    assertFalse(c.append(k("ap_missing"), data(Env.bytes("x"), 0), RAW).get());
    assertFalse(c.prepend(k("ap_missing"), data(Env.bytes("x"), 0), RAW).get());
    wantMiss(k("ap_missing"));

    assertTrue(set(k("ap"), Env.bytes("mid"), 77, 0));
    assertTrue(c.append(k("ap"), data(Env.bytes("_end"), 5), RAW).get());
    assertTrue(c.prepend(k("ap"), data(Env.bytes("start_"), 0), RAW).get());
    wantValue(k("ap"), "start_mid_end");
    assertEquals(77, get(k("ap")).getFlags(), "append/prepend keep the item's flags");
    assertTrue(c.append(k("ap"), data(Env.bytes("\r\nEND\r\n"), 0), RAW).get());
    wantValue(k("ap"), "start_mid_end\r\nEND\r\n");
  }

  @Test
  void cas() throws Exception {
    mustSet(k("cas"), "v1");
    CASValue<CachedData> v = c.gets(k("cas"), RAW);
    assertArrayEquals(Env.bytes("v1"), v.getValue().getData());
    long token = v.getCas();
    assertNotEquals(0, token);

    // fresh token: stored
    assertEquals(CASResponse.OK, c.cas(k("cas"), token, data(Env.bytes("v2"), 0), RAW));
    wantValue(k("cas"), "v2");
    long token2 = c.gets(k("cas"), RAW).getCas();
    assertNotEquals(token, token2);

    // the same token again is stale
    assertEquals(CASResponse.EXISTS, c.cas(k("cas"), token, data(Env.bytes("v3"), 0), RAW));
    wantValue(k("cas"), "v2");

    // a plain set changes the token too
    mustSet(k("cas"), "v4");
    assertEquals(CASResponse.EXISTS, c.cas(k("cas"), token2, data(Env.bytes("v5"), 0), RAW));
    wantValue(k("cas"), "v4");

    // missing key
    assertNull(c.gets(k("cas_missing"), RAW));
    assertEquals(
        CASResponse.NOT_FOUND, c.cas(k("cas_missing"), token, data(Env.bytes("x"), 0), RAW));
    wantMiss(k("cas_missing"));

    // cas ids are unique per item
    Set<Long> seen = new HashSet<>();
    for (int i = 0; i < 20; i++) {
      mustSet(k("cas_u" + i), "x");
      seen.add(c.gets(k("cas_u" + i), RAW).getCas());
    }
    assertEquals(20, seen.size());
  }

  @Test
  void incrDecr() throws Exception {
    mustSet(k("num"), "10");
    assertEquals(15, c.incr(k("num"), 5L));
    assertEquals(12, c.decr(k("num"), 3L));
    assertEquals(12, c.incr(k("num"), 0L));
    wantValue(k("num"), "12");

    mustSet(k("grow"), "99");
    assertEquals(100, c.incr(k("grow"), 1L));
    wantValue(k("grow"), "100");

    // wrap at 2^64
    mustSet(k("wrap"), "18446744073709551615");
    assertEquals(0, c.incr(k("wrap"), 1L));
    mustSet(k("wrap2"), "18446744073709551610");
    assertEquals(4, c.incr(k("wrap2"), 10L));

    // a shrinking counter is rewritten in place, padded with spaces
    mustSet(k("pad"), "100");
    assertEquals(99, c.decr(k("pad"), 1L));
    wantValue(k("pad"), "99 ");

    // decr clamps at 0
    mustSet(k("clamp"), "5");
    assertEquals(0, c.decr(k("clamp"), 10L));
    assertEquals(0, c.decr(k("clamp"), 1L));

    // missing key: spymemcached returns -1
    assertEquals(-1, c.incr(k("num_missing"), 1L));
    assertEquals(-1, c.decr(k("num_missing"), 1L));
    wantMiss(k("num_missing"));
    // ... or creates it with a default value
    assertEquals(7, c.incr(k("num_default"), 1L, 7L));
    assertEquals(8, c.incr(k("num_default"), 1L, 7L));
    wantValue(k("num_default"), "8");

  }

  @Test
  void incrDecrNonNumeric() throws Exception {
    mustSet(k("nan"), "abc");
    mustSet(k("nan_long"), "184467440737095516150"); // 21 digits: not a 64-bit number
    // On its own connection: in text mode spymemcached treats the CLIENT_ERROR
    // reply as fatal for the connection and reconnects.
    MemcachedClient own = connect(protocol(), Env.servers());
    try {
      // spymemcached reports the failure as -1
      assertEquals(-1, own.incr(k("nan"), 1L));
      assertEquals(-1, own.decr(k("nan"), 1L));
      assertEquals(-1, own.incr(k("nan_long"), 1L));
    } finally {
      own.shutdown(5, TimeUnit.SECONDS);
    }
    wantValue(k("nan"), "abc");
    wantValue(k("nan_long"), "184467440737095516150");
  }

  @Test
  void delete() throws Exception {
    mustSet(k("del"), "x");
    assertTrue(c.delete(k("del")).get());
    wantMiss(k("del"));
    assertFalse(c.delete(k("del")).get());
  }

  @Test
  void touch() throws Exception {
    mustSet(k("touch"), "x");
    assertTrue(c.touch(k("touch"), 100).get());
    wantValue(k("touch"), "x");
    assertFalse(c.touch(k("touch_missing"), 100).get());
    if (binary()) {
      CASValue<CachedData> v = c.getAndTouch(k("touch"), 200, RAW);
      assertArrayEquals(Env.bytes("x"), v.getValue().getData());
      assertNull(c.getAndTouch(k("touch_missing"), 200, RAW));
    } else {
      // spymemcached has no ascii get-and-touch
      assertThrows(
          UnsupportedOperationException.class, () -> c.getAndTouch(k("touch"), 200, RAW));
    }
  }

  @Test
  void multiGet100Keys() throws Exception {
    Map<String, byte[]> want = new HashMap<>();
    List<String> keys = new ArrayList<>();
    for (int i = 0; i < 100; i++) {
      String key = k(String.format("multi_%03d", i));
      want.put(key, Env.repeat(Env.bytes("value-" + i), i + 1));
      mustSet(key, want.get(key));
      keys.add(key);
    }
    keys.add(k("multi_missing_1"));
    keys.add(k("multi_missing_2"));
    Map<String, CachedData> got = c.getBulk(keys, RAW);
    assertEquals(want.keySet(), got.keySet());
    for (String key : want.keySet()) {
      assertArrayEquals(want.get(key), got.get(key).getData(), key);
    }

    // 100 keys of 250 bytes
    want.clear();
    keys.clear();
    for (int i = 0; i < 100; i++) {
      String key = Env.key250(k(String.format("long_%03d_", i)));
      want.put(key, Env.bytes(Integer.toString(i)));
      mustSet(key, want.get(key));
      keys.add(key);
    }
    got = c.getBulk(keys, RAW);
    assertEquals(want.keySet(), got.keySet());
    for (String key : want.keySet()) {
      assertArrayEquals(want.get(key), got.get(key).getData(), key);
    }
  }

  @Test
  void expiry() throws Exception {
    byte[] x = Env.bytes("x");
    // ttl >= 2: memcached's clock ticks once a second
    assertTrue(set(k("exp_short"), x, 0, 2));
    assertTrue(set(k("exp_long"), x, 0, 100));
    assertTrue(set(k("exp_forever"), x, 0, 0));
    assertTrue(set(k("exp_touched_short"), x, 0, 100));
    assertTrue(c.touch(k("exp_touched_short"), 2).get());
    assertTrue(set(k("exp_touched_long"), x, 0, 2));
    assertTrue(c.touch(k("exp_touched_long"), 100).get());
    assertTrue(c.add(k("exp_add"), 2, data(Env.bytes("first"), 0), RAW).get());
    wantValue(k("exp_short"), "x"); // 2 is relative, not a unix time

    Env.sleepPastTtl2();

    wantMiss(k("exp_short"));
    wantMiss(k("exp_touched_short"));
    wantMiss(k("exp_add"));
    assertTrue(c.getBulk(List.of(k("exp_short"), k("exp_touched_short")), RAW).isEmpty());
    wantValue(k("exp_long"), "x");
    wantValue(k("exp_forever"), "x");
    wantValue(k("exp_touched_long"), "x");

    // expired items neither block add nor satisfy replace/append/incr/touch
    assertTrue(c.add(k("exp_add"), 0, data(Env.bytes("second"), 0), RAW).get());
    wantValue(k("exp_add"), "second");
    assertFalse(c.replace(k("exp_short"), 0, data(x, 0), RAW).get());
    assertFalse(c.append(k("exp_touched_short"), data(x, 0), RAW).get());
    assertEquals(-1, c.incr(k("exp_short"), 1L));
    assertFalse(c.touch(k("exp_short"), 10).get());
  }

  @Test
  void binaryValues() throws Exception {
    byte[] all = Env.allBytes();
    mustSet(k("bytes"), all);
    wantValue(k("bytes"), all);
    mustSet(k("tricky"), Env.TRICKY);
    wantValue(k("tricky"), Env.TRICKY);
    mustSet(k("end"), "\r\nEND\r\n");
    Map<String, CachedData> got = c.getBulk(List.of(k("end"), k("tricky"), k("bytes")), RAW);
    assertEquals(3, got.size());
    assertArrayEquals(Env.bytes("\r\nEND\r\n"), got.get(k("end")).getData());
    assertArrayEquals(Env.TRICKY, got.get(k("tricky")).getData());
    assertArrayEquals(all, got.get(k("bytes")).getData());
    byte[] big = Env.repeat(all, 1000);
    mustSet(k("bytes_big"), big);
    wantValue(k("bytes_big"), big);
  }

  @Test
  void oneMillionByteValue() throws Exception {
    byte[] v = Env.oneMillionBytes();
    mustSet(k("1m"), v);
    wantValue(k("1m"), v);
    Map<String, CachedData> got = c.getBulk(List.of(k("1m"), k("1m_missing")), RAW);
    assertEquals(Set.of(k("1m")), got.keySet());
    assertArrayEquals(v, got.get(k("1m")).getData());
  }

  @Test
  void twoMegabyteValueRejected() throws Exception {
    mustSet(k("2m"), "old");
    // On its own connection: in text mode spymemcached treats the SERVER_ERROR
    // reply as fatal for the connection and reconnects.
    MemcachedClient own = connect(protocol(), Env.servers());
    boolean answered = true;
    try {
      OperationFuture<Boolean> f = own.set(k("2m"), 0, data(Env.twoMegabytes(), 0), RAW);
      if (binary()) {
        assertFalse(f.get(), "a 2 MB set must fail");
        // memcached's text for status 0x0003 (E2BIG)
        assertEquals("Too large.", f.getStatus().getMessage());
      } else {
        ExecutionException e = assertThrows(ExecutionException.class, f::get);
        // The reply fails the set; or, when spymemcached's reset of the
        // connection wins the race with it, the set is cancelled (seen with
        // both servers). Either way the set failed.
        answered = !(e.getCause() instanceof CancellationException);
        if (answered) {
          assertEquals(
              "OperationException: SERVER: SERVER_ERROR object too large for cache",
              e.getCause().toString());
        }
      }
      assertFalse(f.getStatus().isSuccess());
    } finally {
      own.shutdown(5, TimeUnit.SECONDS);
    }
    // memcached unlinks the old item when a set fails for size. A cancelled
    // set may never have reached the server, so only an answered one says
    // the old item is gone.
    if (answered) {
      wantMiss(k("2m"));
    }
    mustSet(k("after_2m"), "ok");
    wantValue(k("after_2m"), "ok");
  }

  @Test
  void keyLength() throws Exception {
    String key = Env.key250(k("k"));
    mustSet(key, "v250");
    wantValue(key, "v250");
    assertEquals(Set.of(key), c.getBulk(List.of(key), RAW).keySet());
    assertTrue(c.delete(key).get());
    // spymemcached refuses a 251-byte key itself
    assertThrows(IllegalArgumentException.class, () -> c.set(key + "k", 0, "v"));
  }

  @Test
  void flags() throws Exception {
    // text: spymemcached prints the flags as a signed int, so only 0..2^31-1
    int[] all = {0, 1, 12345, 1 << 16, Integer.MAX_VALUE, Integer.MIN_VALUE, -1};
    int n = binary() ? all.length : 5;
    for (int i = 0; i < n; i++) {
      assertTrue(set(k("flags"), Env.bytes("v"), all[i], 0));
      CachedData d = get(k("flags"));
      assertEquals(all[i], d.getFlags(), "flags " + Integer.toUnsignedString(all[i]));
      assertArrayEquals(Env.bytes("v"), d.getData());
    }
  }

  @Test
  void stats() throws Exception {
    mustSet(k("stats"), "x");
    wantValue(k("stats"), "x");
    Map<SocketAddress, Map<String, String>> all = c.getStats();
    assertEquals(1, all.size());
    Map<String, String> stats = all.values().iterator().next();
    for (String name : Env.CORE_STATS) {
      assertTrue(stats.containsKey(name), "stats lack " + name + ": " + stats);
    }
    assertTrue(Long.parseLong(stats.get("pid")) > 0);
    assertTrue(Long.parseLong(stats.get("curr_items")) >= 1);
    assertTrue(Long.parseLong(stats.get("get_hits")) >= 1);
    assertTrue(Long.parseLong(stats.get("cmd_set")) >= 1);
    assertTrue(Long.parseLong(stats.get("curr_connections")) >= 1);
    assertEquals("67108864", stats.get("limit_maxbytes"));
    assertEquals("2", stats.get("threads"));
    String version = c.getVersions().values().iterator().next();
    assertEquals(stats.get("version"), version);
    assertTrue(version.matches("\\d+\\.\\d+\\.\\d+\\S*"), version);
  }
}
