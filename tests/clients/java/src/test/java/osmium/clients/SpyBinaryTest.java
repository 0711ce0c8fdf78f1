package osmium.clients;

import net.spy.memcached.ConnectionFactoryBuilder.Protocol;

/** spymemcached over the binary protocol. */
class SpyBinaryTest extends SpyCases {
  @Override
  Protocol protocol() {
    return Protocol.BINARY;
  }
}
