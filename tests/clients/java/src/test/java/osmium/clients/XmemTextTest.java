package osmium.clients;

/** xmemcached over the text protocol. */
class XmemTextTest extends XmemCases {
  @Override
  boolean binary() {
    return false;
  }
}
