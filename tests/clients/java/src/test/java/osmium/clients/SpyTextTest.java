package osmium.clients;

import net.spy.memcached.ConnectionFactoryBuilder.Protocol;

/** spymemcached over the text protocol. */
class SpyTextTest extends SpyCases {
  @Override
  Protocol protocol() {
    return Protocol.TEXT;
  }
}
