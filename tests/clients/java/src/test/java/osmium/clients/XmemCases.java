package osmium.clients;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import net.rubyeye.xmemcached.CommandFactory;
import net.rubyeye.xmemcached.GetsResponse;
import net.rubyeye.xmemcached.MemcachedClient;
import net.rubyeye.xmemcached.XMemcachedClientBuilder;
import net.rubyeye.xmemcached.command.BinaryCommandFactory;
import net.rubyeye.xmemcached.command.TextCommandFactory;
import net.rubyeye.xmemcached.exception.MemcachedException;
import net.rubyeye.xmemcached.transcoders.CachedData;
import net.rubyeye.xmemcached.transcoders.CompressionMode;
import net.rubyeye.xmemcached.transcoders.Transcoder;
import net.rubyeye.xmemcached.utils.AddrUtil;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * xmemcached cases, run once per protocol by {@link XmemTextTest} and {@link XmemBinaryTest}.
 * Values go through {@link #RAW}, so the server sees exactly the bytes and flags a test chose.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
abstract class XmemCases {
  /**
   * Passes bytes and flags through unchanged, with no client-side size limit (xmemcached's own
   * CachedData refuses values over 1 MB before sending them; the 2 MB test wants the server's
   * answer).
   */
  static final Transcoder<CachedData> RAW =
      new Transcoder<CachedData>() {
        @Override
        public CachedData encode(CachedData o) {
          return o;
        }

        @Override
        public CachedData decode(CachedData d) {
          return d;
        }

        @Override
        public void setPrimitiveAsString(boolean primitiveAsString) {}

        @Override
        public void setPackZeros(boolean packZeros) {}

        @Override
        public void setCompressionThreshold(int to) {}

        @Override
        public boolean isPrimitiveAsString() {
          return false;
        }

        @Override
        public boolean isPackZeros() {
          return false;
        }

        @Override
        public void setCompressionMode(CompressionMode compressMode) {}
      };

  abstract boolean binary();

  MemcachedClient c;

  static MemcachedClient connect(boolean binary, String servers) throws Exception {
    XMemcachedClientBuilder b = new XMemcachedClientBuilder(AddrUtil.getAddresses(servers));
    CommandFactory f = binary ? new BinaryCommandFactory() : new TextCommandFactory();
    b.setCommandFactory(f);
    b.setOpTimeout(10_000);
    b.setConnectTimeout(5_000);
    return b.build();
  }

  @BeforeAll
  void open() throws Exception {
    c = connect(binary(), Env.servers());
  }

  @AfterAll
  void close() throws Exception {
    if (c != null) {
      c.shutdown();
    }
  }

  /** This class's key for name: "jx" + t|b + run + "_" + name. */
  String k(String name) {
    return "jx" + (binary() ? "b" : "t") + Env.RUN + "_" + name;
  }

  static CachedData data(byte[] value, int flags) {
    return new CachedData(flags, value, Integer.MAX_VALUE, -1);
  }

  boolean set(String key, byte[] value, int flags, int exp) throws Exception {
    return c.set(key, exp, data(value, flags), RAW);
  }

  void mustSet(String key, byte[] value) throws Exception {
    assertTrue(set(key, value, 0, 0), "set " + key);
  }

  void mustSet(String key, String value) throws Exception {
    mustSet(key, Env.bytes(value));
  }

  CachedData get(String key) throws Exception {
    return c.get(key, RAW);
  }

  void wantValue(String key, byte[] want) throws Exception {
    CachedData d = get(key);
    assertNotNull(d, "get " + key + ": miss");
    assertArrayEquals(want, d.getData(), "get " + key);
  }

  void wantValue(String key, String want) throws Exception {
    wantValue(key, Env.bytes(want));
  }

  void wantMiss(String key) throws Exception {
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
    assertTrue(c.set(k("str"), 0, "text"));
    assertEquals("text", c.get(k("str")));
    wantValue(k("str"), "text");
  }

  @Test
  void addReplace() throws Exception {
    assertTrue(c.add(k("add"), 0, data(Env.bytes("1"), 0), RAW));
    assertFalse(c.add(k("add"), 0, data(Env.bytes("2"), 0), RAW));
    wantValue(k("add"), "1");

    assertFalse(c.replace(k("repl"), 0, data(Env.bytes("1"), 0), RAW));
    wantMiss(k("repl"));
    mustSet(k("repl"), "1");
    assertTrue(c.replace(k("repl"), 0, data(Env.bytes("2"), 0), RAW));
    wantValue(k("repl"), "2");
  }

  @Test
  void appendPrepend() throws Exception {
    // xmemcached's append/prepend take an Object through the default transcoder:
    // a byte[] goes as-is
    assertFalse(c.append(k("ap_missing"), Env.bytes("x")));
    assertFalse(c.prepend(k("ap_missing"), Env.bytes("x")));
    wantMiss(k("ap_missing"));

    assertTrue(set(k("ap"), Env.bytes("mid"), 77, 0));
    assertTrue(c.append(k("ap"), Env.bytes("_end")));
    assertTrue(c.prepend(k("ap"), Env.bytes("start_")));
    wantValue(k("ap"), "start_mid_end");
    assertEquals(77, get(k("ap")).getFlag(), "append/prepend keep the item's flags");
    assertTrue(c.append(k("ap"), Env.bytes("\r\nEND\r\n")));
    wantValue(k("ap"), "start_mid_end\r\nEND\r\n");
  }

  @Test
  void cas() throws Exception {
    mustSet(k("cas"), "v1");
    GetsResponse<CachedData> v = c.gets(k("cas"), RAW);
    assertArrayEquals(Env.bytes("v1"), v.getValue().getData());
    long token = v.getCas();
    assertNotEquals(0, token);

    // fresh token: stored
    assertTrue(c.cas(k("cas"), 0, data(Env.bytes("v2"), 0), RAW, token));
    wantValue(k("cas"), "v2");
    long token2 = c.gets(k("cas"), RAW).getCas();
    assertNotEquals(token, token2);

    // the same token again is stale
    assertFalse(c.cas(k("cas"), 0, data(Env.bytes("v3"), 0), RAW, token));
    wantValue(k("cas"), "v2");

    // a plain set changes the token too
    mustSet(k("cas"), "v4");
    assertFalse(c.cas(k("cas"), 0, data(Env.bytes("v5"), 0), RAW, token2));
    wantValue(k("cas"), "v4");

    // missing key
    assertNull(c.gets(k("cas_missing"), RAW));
    assertFalse(c.cas(k("cas_missing"), 0, data(Env.bytes("x"), 0), RAW, token));
    wantMiss(k("cas_missing"));

    // cas ids are unique per item, also in a multi-gets
    List<String> keys = new ArrayList<>();
    for (int i = 0; i < 20; i++) {
      mustSet(k("cas_u" + i), "x");
      keys.add(k("cas_u" + i));
    }
    Map<String, GetsResponse<CachedData>> got = c.gets(keys, RAW);
    assertEquals(20, got.size());
    Set<Long> seen = new HashSet<>();
    for (String key : keys) {
      seen.add(got.get(key).getCas());
      assertEquals(got.get(key).getCas(), c.gets(key, RAW).getCas());
    }
    assertEquals(20, seen.size());
  }

  @Test
  void incrDecr() throws Exception {
    mustSet(k("num"), "10");
    assertEquals(15, c.incr(k("num"), 5));
    assertEquals(12, c.decr(k("num"), 3));
    assertEquals(12, c.incr(k("num"), 0));
    wantValue(k("num"), "12");

    mustSet(k("grow"), "99");
    assertEquals(100, c.incr(k("grow"), 1));
    wantValue(k("grow"), "100");

    // wrap at 2^64
    mustSet(k("wrap"), "18446744073709551615");
    assertEquals(0, c.incr(k("wrap"), 1));
    mustSet(k("wrap2"), "18446744073709551610");
    assertEquals(4, c.incr(k("wrap2"), 10));

    // a shrinking counter is rewritten in place, padded with spaces
    mustSet(k("pad"), "100");
    assertEquals(99, c.decr(k("pad"), 1));
    wantValue(k("pad"), "99 ");

    // decr clamps at 0
    mustSet(k("clamp"), "5");
    assertEquals(0, c.decr(k("clamp"), 10));
    assertEquals(0, c.decr(k("clamp"), 1));

    // missing key: xmemcached creates it with the initial value (default 0)
    assertEquals(0, c.incr(k("num_missing"), 1));
    assertEquals(1, c.incr(k("num_missing"), 1));
    assertEquals(7, c.decr(k("num_missing2"), 1, 7));
    assertEquals(6, c.decr(k("num_missing2"), 1, 7));
    wantValue(k("num_missing2"), "6");
  }

  @Test
  void incrDecrNonNumeric() throws Exception {
    mustSet(k("nan"), "abc");
    mustSet(k("nan_long"), "184467440737095516150"); // 21 digits: not a 64-bit number
    for (String key : List.of(k("nan"), k("nan_long"))) {
      MemcachedException e = assertThrows(MemcachedException.class, () -> c.incr(key, 1));
      if (binary()) {
        // xmemcached's text for status 0x0006
        assertEquals("Incr/Decr on non-numeric value.", e.getMessage());
      } else {
        assertEquals("cannot increment or decrement non-numeric value,key=" + key, e.getMessage());
      }
      assertThrows(MemcachedException.class, () -> c.decr(key, 1));
    }
    wantValue(k("nan"), "abc");
    wantValue(k("nan_long"), "184467440737095516150");
    // the connection is still in sync
    mustSet(k("nan2"), "1");
    wantValue(k("nan2"), "1");
  }

  @Test
  void delete() throws Exception {
    mustSet(k("del"), "x");
    assertTrue(c.delete(k("del")));
    wantMiss(k("del"));
    assertFalse(c.delete(k("del")));
  }

  @Test
  void touch() throws Exception {
    mustSet(k("touch"), "x");
    assertTrue(c.touch(k("touch"), 100));
    wantValue(k("touch"), "x");
    assertFalse(c.touch(k("touch_missing"), 100));
    if (binary()) {
      // through the default transcoder: flags 0 is a String
      assertEquals("x", c.getAndTouch(k("touch"), 200));
      assertNull(c.getAndTouch(k("touch_missing"), 200));
    } else {
      // xmemcached has no ascii get-and-touch
      assertThrows(UnsupportedOperationException.class, () -> c.getAndTouch(k("touch"), 200));
    }
  }

  @Test
  void noreply() throws Exception {
    // text: "noreply"; binary: the quiet opcodes (SETQ, ADDQ, DELETEQ, ...)
    c.setWithNoReply(k("nr"), 0, Env.bytes("1"));
    c.addWithNoReply(k("nr"), 0, Env.bytes("2"));
    c.appendWithNoReply(k("nr"), Env.bytes("0"));
    c.incrWithNoReply(k("nr"), 5);
    wantValue(k("nr"), "15");
    c.deleteWithNoReply(k("nr"));
    wantMiss(k("nr"));
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
    Map<String, CachedData> got = c.get(keys, RAW);
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
    got = c.get(keys, RAW);
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
    assertTrue(c.touch(k("exp_touched_short"), 2));
    assertTrue(set(k("exp_touched_long"), x, 0, 2));
    assertTrue(c.touch(k("exp_touched_long"), 100));
    assertTrue(set(k("exp_gat_long"), x, 0, binary() ? 2 : 100));
    if (binary()) {
      assertNotNull(c.getAndTouch(k("exp_gat_long"), 100));
    }
    assertTrue(c.add(k("exp_add"), 2, data(Env.bytes("first"), 0), RAW));
    wantValue(k("exp_short"), "x"); // 2 is relative, not a unix time

    Env.sleepPastTtl2();

    wantMiss(k("exp_short"));
    wantMiss(k("exp_touched_short"));
    wantMiss(k("exp_add"));
    assertTrue(c.get(List.of(k("exp_short"), k("exp_touched_short")), RAW).isEmpty());
    wantValue(k("exp_long"), "x");
    wantValue(k("exp_forever"), "x");
    wantValue(k("exp_touched_long"), "x");
    wantValue(k("exp_gat_long"), "x");

    // expired items neither block add nor satisfy replace/append/touch
    assertTrue(c.add(k("exp_add"), 0, data(Env.bytes("second"), 0), RAW));
    wantValue(k("exp_add"), "second");
    assertFalse(c.replace(k("exp_short"), 0, data(x, 0), RAW));
    assertFalse(c.append(k("exp_touched_short"), x));
    assertFalse(c.touch(k("exp_short"), 10));
  }

  @Test
  void binaryValues() throws Exception {
    byte[] all = Env.allBytes();
    mustSet(k("bytes"), all);
    wantValue(k("bytes"), all);
    mustSet(k("tricky"), Env.TRICKY);
    wantValue(k("tricky"), Env.TRICKY);
    mustSet(k("end"), "\r\nEND\r\n");
    Map<String, CachedData> got = c.get(List.of(k("end"), k("tricky"), k("bytes")), RAW);
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
    Map<String, CachedData> got = c.get(List.of(k("1m"), k("1m_missing")), RAW);
    assertEquals(Set.of(k("1m")), got.keySet());
    assertArrayEquals(v, got.get(k("1m")).getData());
  }

  @Test
  void twoMegabyteValueRejected() throws Exception {
    mustSet(k("2m"), "old");
    MemcachedException e =
        assertThrows(MemcachedException.class, () -> set(k("2m"), Env.twoMegabytes(), 0, 0));
    if (binary()) {
      // xmemcached's text for status 0x0003 (E2BIG)
      assertEquals("Value is too big.", e.getMessage());
    } else {
      assertEquals("object too large for cache,key=" + k("2m"), e.getMessage());
    }
    // memcached unlinks the old item when a set fails for size
    wantMiss(k("2m"));
    // the payload was swallowed: the connection still works
    mustSet(k("after_2m"), "ok");
    wantValue(k("after_2m"), "ok");
  }

  @Test
  void keyLength() throws Exception {
    String key = Env.key250(k("k"));
    mustSet(key, "v250");
    wantValue(key, "v250");
    assertEquals(Set.of(key), c.get(List.of(key), RAW).keySet());
    assertTrue(c.delete(key));
    // xmemcached refuses a 251-byte key itself
    assertThrows(IllegalArgumentException.class, () -> c.set(key + "k", 0, "v"));
  }

  @Test
  void flags() throws Exception {
    // text: xmemcached cannot encode flags >= 2^31 (negative ints), so only 0..2^31-1
    int[] all = {0, 1, 12345, 1 << 16, Integer.MAX_VALUE, Integer.MIN_VALUE, -1};
    for (int i = 0; i < (binary() ? all.length : 5); i++) {
      int flags = all[i];
      assertTrue(set(k("flags"), Env.bytes("v"), flags, 0));
      CachedData d = get(k("flags"));
      assertEquals(flags, d.getFlag(), "flags " + Integer.toUnsignedString(flags));
      assertArrayEquals(Env.bytes("v"), d.getData());
    }
  }

  @Test
  void stats() throws Exception {
    mustSet(k("stats"), "x");
    wantValue(k("stats"), "x");
    Map<InetSocketAddress, Map<String, String>> all = c.getStats();
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
