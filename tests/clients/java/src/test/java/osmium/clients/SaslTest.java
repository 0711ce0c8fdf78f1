package osmium.clients;

import static java.util.concurrent.TimeUnit.MILLISECONDS;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetSocketAddress;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;
import net.rubyeye.xmemcached.XMemcachedClientBuilder;
import net.rubyeye.xmemcached.auth.AuthInfo;
import net.rubyeye.xmemcached.command.BinaryCommandFactory;
import net.rubyeye.xmemcached.exception.MemcachedServerException;
import net.spy.memcached.AddrUtil;
import net.spy.memcached.ConnectionFactoryBuilder;
import net.spy.memcached.ConnectionFactoryBuilder.Protocol;
import net.spy.memcached.FailureMode;
import net.spy.memcached.MemcachedClient;
import net.spy.memcached.auth.AuthDescriptor;
import net.spy.memcached.auth.PlainCallbackHandler;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.parallel.Execution;
import org.junit.jupiter.api.parallel.ExecutionMode;

/**
 * SASL PLAIN over the binary protocol, against a server started with -S (memcached: Cyrus SASL
 * with its plain password file, MEMCACHED_SASL_PWDB; osmium: --sasl-pwdb). Correct credentials work; a wrong password gets nothing
 * done. The cases use their own clients and keys and run concurrently (the wrong-password ones
 * wait out a timeout).
 */
@Execution(ExecutionMode.CONCURRENT)
class SaslTest {
  /** How long a client with a wrong password is given to (wrongly) succeed. */
  static final long WRONG_PASSWORD_TIMEOUT_MS = 2000;

  static String k(String name) {
    return "jsasl" + Env.RUN + "_" + name;
  }

  static String user() {
    Env.saslServers(); // fails first with the reason if there is no SASL server
    return Env.require("MEMCACHED_SASL_USER");
  }

  static String password() {
    return Env.require("MEMCACHED_SASL_PASSWORD");
  }

  static MemcachedClient spy(String user, String password, long opTimeout) throws Exception {
    return new MemcachedClient(
        new ConnectionFactoryBuilder()
            .setProtocol(Protocol.BINARY)
            .setAuthDescriptor(
                new AuthDescriptor(
                    new String[] {"PLAIN"}, new PlainCallbackHandler(user, password)))
            .setOpTimeout(opTimeout)
            // Retry, not Cancel: operations wait for the authentication to finish
            .setFailureMode(FailureMode.Retry)
            .setDaemon(true)
            .build(),
        AddrUtil.getAddresses(Env.saslServers()));
  }

  static net.rubyeye.xmemcached.MemcachedClient xmem(
      String user, String password, long opTimeout) throws Exception {
    List<InetSocketAddress> addrs =
        net.rubyeye.xmemcached.utils.AddrUtil.getAddresses(Env.saslServers());
    XMemcachedClientBuilder b = new XMemcachedClientBuilder(addrs);
    b.setCommandFactory(new BinaryCommandFactory());
    // xmemcached looks the credentials up by "host:port" of the connection's remote address,
    // whose host string can come out as "localhost" (reverse lookup of 127.0.0.1) and then
    // never authenticates: register them under both names.
    AuthInfo auth = AuthInfo.plain(user, password);
    b.addAuthInfo(addrs.get(0), auth);
    b.addAuthInfo(InetSocketAddress.createUnresolved("localhost", addrs.get(0).getPort()), auth);
    b.setOpTimeout(opTimeout);
    b.setConnectTimeout(5_000);
    return b.build();
  }

  /** True if `op` throws or returns false. */
  static boolean failsOrFalse(Callable<Boolean> op) {
    try {
      return !op.call();
    } catch (Exception e) {
      return true;
    }
  }

  @Test
  void spymemcachedPlainCorrectPassword() throws Exception {
    MemcachedClient c = spy(user(), password(), 10_000);
    try {
      assertTrue(c.set(k("spy"), 0, "authenticated").get());
      assertEquals("authenticated", c.get(k("spy")));
      assertTrue(c.add(k("spy_add"), 0, "a").get());
      assertEquals(5, c.incr(k("spy_ctr"), 1L, 5L));
      assertTrue(c.delete(k("spy_add")).get());
      Map<String, Object> got = c.getBulk(k("spy"), k("spy_ctr"), k("spy_add"));
      assertEquals(Map.of(k("spy"), "authenticated", k("spy_ctr"), "5"), got);
    } finally {
      c.shutdown(5, TimeUnit.SECONDS);
    }
  }

  @Test
  void spymemcachedPlainWrongPassword() throws Exception {
    MemcachedClient bad = spy(user(), password() + "-wrong", WRONG_PASSWORD_TIMEOUT_MS);
    try {
      assertTrue(
          failsOrFalse(
              () -> bad.set(k("spy_bad"), 0, "x").get(WRONG_PASSWORD_TIMEOUT_MS, MILLISECONDS)),
          "set with a wrong password must not succeed");
    } finally {
      bad.shutdown(100, MILLISECONDS);
    }
    MemcachedClient good = spy(user(), password(), 10_000);
    try {
      assertNull(good.get(k("spy_bad")), "the wrong-password client stored a value");
    } finally {
      good.shutdown(5, TimeUnit.SECONDS);
    }
  }

  @Test
  void spymemcachedUnknownUser() throws Exception {
    MemcachedClient bad = spy(user() + "-nobody", password(), WRONG_PASSWORD_TIMEOUT_MS);
    try {
      assertTrue(
          failsOrFalse(
              () -> bad.set(k("spy_nobody"), 0, "x").get(WRONG_PASSWORD_TIMEOUT_MS, MILLISECONDS)),
          "set as an unknown user must not succeed");
    } finally {
      bad.shutdown(100, MILLISECONDS);
    }
  }

  @Test
  void xmemcachedPlainCorrectPassword() throws Exception {
    net.rubyeye.xmemcached.MemcachedClient c = xmem(user(), password(), 10_000);
    try {
      assertTrue(c.set(k("xmem"), 0, Env.bytes("authenticated")));
      assertArrayEquals(Env.bytes("authenticated"), c.get(k("xmem")));
      assertTrue(c.add(k("xmem_add"), 0, "a"));
      assertFalse(c.add(k("xmem_add"), 0, "b"));
      assertEquals(5, c.incr(k("xmem_ctr"), 1, 5));
      assertEquals(6, c.incr(k("xmem_ctr"), 1, 5));
      assertTrue(c.delete(k("xmem_add")));
      assertEquals(1, c.getStats().size());
    } finally {
      c.shutdown();
    }
  }

  @Test
  void xmemcachedPlainWrongPassword() throws Exception {
    net.rubyeye.xmemcached.MemcachedClient bad =
        xmem(user(), password() + "-wrong", WRONG_PASSWORD_TIMEOUT_MS);
    try {
      assertTrue(
          failsOrFalse(() -> bad.set(k("xmem_bad"), 0, "x")),
          "set with a wrong password must not succeed");
    } finally {
      bad.shutdown();
    }
    net.rubyeye.xmemcached.MemcachedClient good = xmem(user(), password(), 10_000);
    try {
      assertNull(good.get(k("xmem_bad")), "the wrong-password client stored a value");
    } finally {
      good.shutdown();
    }
  }

  @Test
  void noCredentials() throws Exception {
    // a binary client that does not authenticate is refused with status 0x0020
    List<InetSocketAddress> addrs =
        net.rubyeye.xmemcached.utils.AddrUtil.getAddresses(Env.saslServers());
    XMemcachedClientBuilder b = new XMemcachedClientBuilder(addrs);
    b.setCommandFactory(new BinaryCommandFactory());
    b.setOpTimeout(WRONG_PASSWORD_TIMEOUT_MS);
    net.rubyeye.xmemcached.MemcachedClient anon = b.build();
    try {
      MemcachedServerException e =
          assertThrows(MemcachedServerException.class, () -> anon.set(k("anon"), 0, "x"));
      // xmemcached's text for status 0x0020
      assertEquals("Authentication required or not successful", e.getMessage());
    } finally {
      anon.shutdown();
    }
  }
}
