package osmium.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import net.spy.memcached.AddrUtil;
import net.spy.memcached.ConnectionFactoryBuilder;
import net.spy.memcached.ConnectionFactoryBuilder.Locator;
import net.spy.memcached.ConnectionFactoryBuilder.Protocol;
import net.spy.memcached.DefaultHashAlgorithm;
import net.spy.memcached.FailureMode;
import net.spy.memcached.MemcachedClient;
import org.junit.jupiter.api.Test;

/**
 * spymemcached's ketama (KETAMA_HASH, the consistent locator, as its KetamaConnectionFactory)
 * over three servers of one kind (MEMCACHED_KETAMA_SERVERS), text and binary: every key is
 * stored on exactly the server spymemcached's locator names for it, and read back through the
 * ketama client.
 */
class SpyKetamaTest {
  static MemcachedClient ketama(Protocol protocol, List<InetSocketAddress> addresses)
      throws Exception {
    return SpyCases.connected(
        new ConnectionFactoryBuilder()
            .setProtocol(protocol)
            .setLocatorType(Locator.CONSISTENT)
            .setHashAlg(DefaultHashAlgorithm.KETAMA_HASH)
            .setOpTimeout(10_000)
            .setFailureMode(FailureMode.Cancel)
            .setDaemon(true)
            .build(),
        addresses);
  }

  void placesEveryKeyWhereItsLocatorSays(Protocol protocol) throws Exception {
    List<InetSocketAddress> addresses =
        AddrUtil.getAddresses(Env.require("MEMCACHED_KETAMA_SERVERS"));
    assertEquals(3, addresses.size());
    MemcachedClient ring = ketama(protocol, addresses);
    List<MemcachedClient> direct = new ArrayList<>();
    try {
      for (InetSocketAddress a : addresses) {
        direct.add(SpyCases.connect(Protocol.TEXT, a.getHostString() + ":" + a.getPort()));
      }
      String stem = "jk" + (protocol == Protocol.BINARY ? "b" : "t") + Env.RUN + "_";
      List<String> keys = new ArrayList<>();
      for (int i = 0; i < 300; i++) {
        String key = stem + i;
        keys.add(key);
        assertTrue(ring.set(key, 0, "v" + i).get(), key);
      }
      Map<String, Object> all = ring.getBulk(keys);
      assertEquals(keys.size(), all.size(), "get_multi through ketama");
      Set<Integer> used = new HashSet<>();
      Map<String, Integer> misplaced = new HashMap<>();
      for (String key : keys) {
        InetSocketAddress want =
            (InetSocketAddress) ring.getNodeLocator().getPrimary(key).getSocketAddress();
        int wanted = addresses.indexOf(want);
        used.add(wanted);
        for (int s = 0; s < direct.size(); s++) {
          boolean holds = direct.get(s).get(key) != null;
          if (holds != (s == wanted)) {
            misplaced.put(key, s);
          }
        }
      }
      assertTrue(misplaced.isEmpty(), Env.kind() + ": keys not where ketama put them: " + misplaced);
      assertEquals(3, used.size(), "keys spread over the three servers");
    } finally {
      ring.shutdown(5, TimeUnit.SECONDS);
      for (MemcachedClient d : direct) {
        d.shutdown(5, TimeUnit.SECONDS);
      }
    }
  }

  @Test
  void textKetama() throws Exception {
    placesEveryKeyWhereItsLocatorSays(Protocol.TEXT);
  }

  @Test
  void binaryKetama() throws Exception {
    placesEveryKeyWhereItsLocatorSays(Protocol.BINARY);
  }
}
