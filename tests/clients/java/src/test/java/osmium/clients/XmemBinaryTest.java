package osmium.clients;

/** xmemcached over the binary protocol. */
class XmemBinaryTest extends XmemCases {
  @Override
  boolean binary() {
    return true;
  }
}
