# Package marker: lets the client suites import `support.servers` (tests/ is
# put on sys.path as this package's root) and keeps module names unique.
