// gomemcache (github.com/bradfitz/gomemcache, text protocol) against the
// server named by MEMCACHED_SERVERS (host:port). tests/clients/test_go.py runs
// this suite once against genuine memcached and once against osmium, in
// plaintext and again over TLS (tls_test.go); every expectation is what
// memcached 1.6 answers.
//
// Each test uses its own key prefix (plus one per run, see pk) so the suite
// can share a server with other suites. gomemcache has no stats call, so stats are not covered here.
package clients

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// run makes this run's keys unique, so the suite can be rerun against the
// same server and share it with other suites.
var run = strconv.FormatInt(time.Now().UnixNano(), 36)

// pk is the key for name in this run: "go<run>_<name>".
func pk(name string) string { return "go" + run + "_" + name }

var tricky = []byte("a\r\nEND\r\nb\r\nVALUE x 0 1\r\n\r\n\x00")

func allBytes() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func server(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("MEMCACHED_SERVERS")
	if addr == "" {
		t.Fatal("MEMCACHED_SERVERS is not set (run via tests/clients/test_go.py)")
	}
	return addr
}

func client(t *testing.T) *memcache.Client {
	t.Helper()
	c := memcache.New(server(t))
	c.Timeout = 10 * time.Second
	useTLS(c, suiteTLS(t)) // over TLS when MEMCACHED_TLS_CA is set (tls_test.go)
	t.Cleanup(func() { c.Close() })
	return c
}

func mustSet(t *testing.T, c *memcache.Client, key string, value []byte) {
	t.Helper()
	if err := c.Set(&memcache.Item{Key: key, Value: value}); err != nil {
		t.Fatalf("set %s: %v", key, err)
	}
}

func wantValue(t *testing.T, c *memcache.Client, key string, want []byte) *memcache.Item {
	t.Helper()
	it, err := c.Get(key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if !bytes.Equal(it.Value, want) {
		t.Fatalf("get %s = %q (len %d), want %q (len %d)", key, short(it.Value), len(it.Value),
			short(want), len(want))
	}
	return it
}

func wantMiss(t *testing.T, c *memcache.Client, key string) {
	t.Helper()
	it, err := c.Get(key)
	if !errors.Is(err, memcache.ErrCacheMiss) {
		t.Fatalf("get %s: want ErrCacheMiss, got item %v err %v", key, it, err)
	}
}

func wantErr(t *testing.T, what string, got, want error) {
	t.Helper()
	if !errors.Is(got, want) {
		t.Fatalf("%s: got error %v, want %v", what, got, want)
	}
}

func short(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

func TestSetGet(t *testing.T) {
	c := client(t)
	mustSet(t, c, pk("sg_a"), []byte("hello"))
	wantValue(t, c, pk("sg_a"), []byte("hello"))
	mustSet(t, c, pk("sg_a"), []byte("world"))
	wantValue(t, c, pk("sg_a"), []byte("world"))
	wantMiss(t, c, pk("sg_missing"))
	mustSet(t, c, pk("sg_empty"), []byte{})
	wantValue(t, c, pk("sg_empty"), []byte{})
}

func TestAddReplace(t *testing.T) {
	c := client(t)
	if err := c.Add(&memcache.Item{Key: pk("add"), Value: []byte("1")}); err != nil {
		t.Fatalf("add: %v", err)
	}
	wantErr(t, "second add", c.Add(&memcache.Item{Key: pk("add"), Value: []byte("2")}), memcache.ErrNotStored)
	wantValue(t, c, pk("add"), []byte("1"))

	wantErr(t, "replace missing", c.Replace(&memcache.Item{Key: pk("repl"), Value: []byte("1")}),
		memcache.ErrNotStored)
	wantMiss(t, c, pk("repl"))
	mustSet(t, c, pk("repl"), []byte("1"))
	if err := c.Replace(&memcache.Item{Key: pk("repl"), Value: []byte("2")}); err != nil {
		t.Fatalf("replace: %v", err)
	}
	wantValue(t, c, pk("repl"), []byte("2"))
}

func TestAppendPrepend(t *testing.T) {
	c := client(t)
	wantErr(t, "append missing", c.Append(&memcache.Item{Key: pk("ap_missing"), Value: []byte("x")}),
		memcache.ErrNotStored)
	wantErr(t, "prepend missing", c.Prepend(&memcache.Item{Key: pk("ap_missing"), Value: []byte("x")}),
		memcache.ErrNotStored)
	wantMiss(t, c, pk("ap_missing"))

	if err := c.Set(&memcache.Item{Key: pk("ap"), Value: []byte("mid"), Flags: 77}); err != nil {
		t.Fatal(err)
	}
	if err := c.Append(&memcache.Item{Key: pk("ap"), Value: []byte("_end"), Flags: 5}); err != nil {
		t.Fatalf("append: %v", err)
	}
	if err := c.Prepend(&memcache.Item{Key: pk("ap"), Value: []byte("start_")}); err != nil {
		t.Fatalf("prepend: %v", err)
	}
	it := wantValue(t, c, pk("ap"), []byte("start_mid_end"))
	if it.Flags != 77 {
		t.Fatalf("append/prepend changed flags to %d, want 77", it.Flags)
	}
	if err := c.Append(&memcache.Item{Key: pk("ap"), Value: []byte("\r\nEND\r\n")}); err != nil {
		t.Fatalf("append: %v", err)
	}
	wantValue(t, c, pk("ap"), []byte("start_mid_end\r\nEND\r\n"))
}

func TestCompareAndSwap(t *testing.T) {
	c := client(t)
	mustSet(t, c, pk("cas"), []byte("v1"))
	it := wantValue(t, c, pk("cas"), []byte("v1"))
	if it.CasID == 0 {
		t.Fatal("get returned cas id 0")
	}
	token := it.CasID

	// fresh token: stored
	it.Value = []byte("v2")
	if err := c.CompareAndSwap(it); err != nil {
		t.Fatalf("cas with fresh token: %v", err)
	}
	it2 := wantValue(t, c, pk("cas"), []byte("v2"))
	if it2.CasID == token {
		t.Fatal("cas did not change the cas id")
	}

	// the same token again is stale
	stale := &memcache.Item{Key: pk("cas"), Value: []byte("v3"), CasID: token}
	wantErr(t, "cas with stale token", c.CompareAndSwap(stale), memcache.ErrCASConflict)
	wantValue(t, c, pk("cas"), []byte("v2"))

	// a plain set changes the token too
	mustSet(t, c, pk("cas"), []byte("v4"))
	it2.Value = []byte("v5")
	wantErr(t, "cas after set", c.CompareAndSwap(it2), memcache.ErrCASConflict)
	wantValue(t, c, pk("cas"), []byte("v4"))

	// missing key: memcached answers NOT_FOUND
	missing := &memcache.Item{Key: pk("cas_missing"), Value: []byte("x"), CasID: token}
	wantErr(t, "cas on missing key", c.CompareAndSwap(missing), memcache.ErrCacheMiss)
	wantMiss(t, c, pk("cas_missing"))

	// cas ids are unique per item
	seen := map[uint64]bool{}
	for i := 0; i < 20; i++ {
		key := pk(fmt.Sprintf("cas_u%d", i))
		mustSet(t, c, key, []byte("x"))
		seen[wantValue(t, c, key, []byte("x")).CasID] = true
	}
	if len(seen) != 20 {
		t.Fatalf("20 items got %d distinct cas ids", len(seen))
	}
}

func TestIncrDecr(t *testing.T) {
	c := client(t)
	incr := func(key string, delta, want uint64) {
		t.Helper()
		got, err := c.Increment(key, delta)
		if err != nil || got != want {
			t.Fatalf("incr %s %d = %d, %v; want %d", key, delta, got, err, want)
		}
	}
	decr := func(key string, delta, want uint64) {
		t.Helper()
		got, err := c.Decrement(key, delta)
		if err != nil || got != want {
			t.Fatalf("decr %s %d = %d, %v; want %d", key, delta, got, err, want)
		}
	}

	mustSet(t, c, pk("num"), []byte("10"))
	incr(pk("num"), 5, 15)
	decr(pk("num"), 3, 12)
	incr(pk("num"), 0, 12)
	wantValue(t, c, pk("num"), []byte("12"))

	// growing the length
	mustSet(t, c, pk("grow"), []byte("99"))
	incr(pk("grow"), 1, 100)
	wantValue(t, c, pk("grow"), []byte("100"))

	// wrap at 2^64
	mustSet(t, c, pk("wrap"), []byte("18446744073709551615"))
	incr(pk("wrap"), 1, 0)
	mustSet(t, c, pk("wrap2"), []byte("18446744073709551610"))
	incr(pk("wrap2"), 10, 4)
	mustSet(t, c, pk("big"), []byte("18446744073709551614"))
	incr(pk("big"), 1, 18446744073709551615)
	mustSet(t, c, pk("bigdelta"), []byte("1"))
	incr(pk("bigdelta"), 18446744073709551615, 0)

	// a shrinking counter is rewritten in place, padded with spaces
	mustSet(t, c, pk("pad"), []byte("100"))
	decr(pk("pad"), 1, 99)
	wantValue(t, c, pk("pad"), []byte("99 "))

	// decr clamps at 0
	mustSet(t, c, pk("clamp"), []byte("5"))
	decr(pk("clamp"), 10, 0)
	decr(pk("clamp"), 1, 0)

	// missing key
	_, err := c.Increment(pk("num_missing"), 1)
	wantErr(t, "incr missing", err, memcache.ErrCacheMiss)
	_, err = c.Decrement(pk("num_missing"), 1)
	wantErr(t, "decr missing", err, memcache.ErrCacheMiss)
	wantMiss(t, c, pk("num_missing"))

	// non-numeric value
	mustSet(t, c, pk("nan"), []byte("abc"))
	const nonNumeric = "memcache: client error: cannot increment or decrement non-numeric value"
	if _, err := c.Increment(pk("nan"), 1); err == nil || err.Error() != nonNumeric {
		t.Fatalf("incr non-numeric: got %v, want %q", err, nonNumeric)
	}
	if _, err := c.Decrement(pk("nan"), 1); err == nil || err.Error() != nonNumeric {
		t.Fatalf("decr non-numeric: got %v, want %q", err, nonNumeric)
	}
	wantValue(t, c, pk("nan"), []byte("abc"))
	// a value longer than 20 digits is not a number either
	mustSet(t, c, pk("nan_long"), []byte("184467440737095516150"))
	if _, err := c.Increment(pk("nan_long"), 1); err == nil || err.Error() != nonNumeric {
		t.Fatalf("incr 21-digit value: got %v, want %q", err, nonNumeric)
	}
}

func TestDelete(t *testing.T) {
	c := client(t)
	mustSet(t, c, pk("del"), []byte("x"))
	if err := c.Delete(pk("del")); err != nil {
		t.Fatalf("delete: %v", err)
	}
	wantMiss(t, c, pk("del"))
	wantErr(t, "delete missing", c.Delete(pk("del")), memcache.ErrCacheMiss)
}

func TestTouch(t *testing.T) {
	c := client(t)
	mustSet(t, c, pk("touch"), []byte("x"))
	if err := c.Touch(pk("touch"), 100); err != nil {
		t.Fatalf("touch: %v", err)
	}
	wantValue(t, c, pk("touch"), []byte("x"))
	wantErr(t, "touch missing", c.Touch(pk("touch_missing"), 100), memcache.ErrCacheMiss)

	it, err := c.GetAndTouch(pk("touch"), 200)
	if err != nil || !bytes.Equal(it.Value, []byte("x")) {
		t.Fatalf("gat: %v, %v", it, err)
	}
	_, err = c.GetAndTouch(pk("touch_missing"), 200)
	wantErr(t, "gat missing", err, memcache.ErrCacheMiss)
}

func TestGetMulti100Keys(t *testing.T) {
	c := client(t)
	want := map[string][]byte{}
	var keys []string
	for i := 0; i < 100; i++ {
		key := pk(fmt.Sprintf("multi_%03d", i))
		want[key] = bytes.Repeat([]byte(fmt.Sprintf("value-%d", i)), i+1)
		mustSet(t, c, key, want[key])
		keys = append(keys, key)
	}
	got, err := c.GetMulti(append(keys, pk("multi_missing_1"), pk("multi_missing_2")))
	if err != nil {
		t.Fatalf("get multi: %v", err)
	}
	if len(got) != 100 {
		t.Fatalf("get multi returned %d items, want 100", len(got))
	}
	cas := map[uint64]bool{}
	for k, v := range want {
		if got[k] == nil || !bytes.Equal(got[k].Value, v) {
			t.Fatalf("get multi %s = %v, want %q", k, got[k], v)
		}
		cas[got[k].CasID] = true
	}
	if len(cas) != 100 {
		t.Fatalf("100 items have %d distinct cas ids", len(cas))
	}

	// 100 keys of 250 bytes in one `gets` line (~25 KB)
	want = map[string][]byte{}
	keys = nil
	for i := 0; i < 100; i++ {
		key := pk(fmt.Sprintf("long_%03d_", i))
		key += strings.Repeat("x", 250-len(key))
		want[key] = []byte(fmt.Sprint(i))
		mustSet(t, c, key, want[key])
		keys = append(keys, key)
	}
	got, err = c.GetMulti(keys)
	if err != nil {
		t.Fatalf("get multi of long keys: %v", err)
	}
	if len(got) != 100 {
		t.Fatalf("get multi of long keys returned %d items, want 100", len(got))
	}
	for k, v := range want {
		if got[k] == nil || !bytes.Equal(got[k].Value, v) {
			t.Fatalf("get multi %s = %v, want %q", k, got[k], v)
		}
	}
}

func TestExpiry(t *testing.T) {
	c := client(t)
	set := func(key string, ttl int32) {
		t.Helper()
		if err := c.Set(&memcache.Item{Key: key, Value: []byte("x"), Expiration: ttl}); err != nil {
			t.Fatalf("set %s: %v", key, err)
		}
	}
	// ttl >= 2: memcached's clock ticks once a second
	set(pk("exp_short"), 2)
	set(pk("exp_long"), 100)
	set(pk("exp_forever"), 0)
	set(pk("exp_touched_short"), 100)
	if err := c.Touch(pk("exp_touched_short"), 2); err != nil {
		t.Fatal(err)
	}
	set(pk("exp_touched_long"), 2)
	if err := c.Touch(pk("exp_touched_long"), 100); err != nil {
		t.Fatal(err)
	}
	set(pk("exp_gat_long"), 2)
	if _, err := c.GetAndTouch(pk("exp_gat_long"), 100); err != nil {
		t.Fatal(err)
	}
	if err := c.Add(&memcache.Item{Key: pk("exp_add"), Value: []byte("first"), Expiration: 2}); err != nil {
		t.Fatal(err)
	}
	wantValue(t, c, pk("exp_short"), []byte("x")) // 2 is relative, not a unix time

	time.Sleep(3100 * time.Millisecond)

	wantMiss(t, c, pk("exp_short"))
	wantMiss(t, c, pk("exp_touched_short"))
	wantMiss(t, c, pk("exp_add"))
	got, err := c.GetMulti([]string{pk("exp_short"), pk("exp_touched_short")})
	if err != nil || len(got) != 0 {
		t.Fatalf("get multi of expired keys: %v, %v", got, err)
	}
	wantValue(t, c, pk("exp_long"), []byte("x"))
	wantValue(t, c, pk("exp_forever"), []byte("x"))
	wantValue(t, c, pk("exp_touched_long"), []byte("x"))
	wantValue(t, c, pk("exp_gat_long"), []byte("x"))

	// expired items neither block add nor satisfy replace/append/incr/touch
	if err := c.Add(&memcache.Item{Key: pk("exp_add"), Value: []byte("second")}); err != nil {
		t.Fatalf("add over expired item: %v", err)
	}
	wantValue(t, c, pk("exp_add"), []byte("second"))
	wantErr(t, "replace expired", c.Replace(&memcache.Item{Key: pk("exp_short"), Value: []byte("y")}),
		memcache.ErrNotStored)
	wantErr(t, "append expired", c.Append(&memcache.Item{Key: pk("exp_touched_short"), Value: []byte("y")}),
		memcache.ErrNotStored)
	_, err = c.Increment(pk("exp_short"), 1)
	wantErr(t, "incr expired", err, memcache.ErrCacheMiss)
	wantErr(t, "touch expired", c.Touch(pk("exp_short"), 10), memcache.ErrCacheMiss)
}

func TestBinaryValues(t *testing.T) {
	c := client(t)
	all := allBytes()
	mustSet(t, c, pk("bytes"), all)
	wantValue(t, c, pk("bytes"), all)
	mustSet(t, c, pk("tricky"), tricky)
	wantValue(t, c, pk("tricky"), tricky)
	mustSet(t, c, pk("end"), []byte("\r\nEND\r\n"))
	got, err := c.GetMulti([]string{pk("end"), pk("tricky"), pk("bytes")})
	if err != nil || len(got) != 3 ||
		!bytes.Equal(got[pk("end")].Value, []byte("\r\nEND\r\n")) ||
		!bytes.Equal(got[pk("tricky")].Value, tricky) ||
		!bytes.Equal(got[pk("bytes")].Value, all) {
		t.Fatalf("get multi of binary values: %v, %v", got, err)
	}
	big := bytes.Repeat(all, 1000)
	mustSet(t, c, pk("bytes_big"), big)
	wantValue(t, c, pk("bytes_big"), big)
}

func TestOneMillionByteValue(t *testing.T) {
	c := client(t)
	value := make([]byte, 1_000_000)
	for i := range value {
		value[i] = byte(i % 251)
	}
	mustSet(t, c, pk("1m"), value)
	wantValue(t, c, pk("1m"), value)
	got, err := c.GetMulti([]string{pk("1m"), pk("1m_missing")})
	if err != nil || len(got) != 1 || !bytes.Equal(got[pk("1m")].Value, value) {
		t.Fatalf("get multi of 1 MB value failed: %d items, %v", len(got), err)
	}
}

func TestTwoMegabyteValueRejected(t *testing.T) {
	c := client(t)
	mustSet(t, c, pk("2m"), []byte("old"))
	err := c.Set(&memcache.Item{Key: pk("2m"), Value: bytes.Repeat([]byte("x"), 2*1024*1024)})
	// gomemcache reports the SERVER_ERROR line it does not know as-is
	const want = "memcache: unexpected response line from \"set\": \"SERVER_ERROR object too large for cache\\r\\n\""
	if err == nil || err.Error() != want {
		t.Fatalf("set of 2 MB value: got %v, want %s", err, want)
	}
	// memcached unlinks the old item when a set fails for size
	wantMiss(t, c, pk("2m"))
	// the server swallowed the payload: the next commands work
	mustSet(t, c, pk("after_2m"), []byte("ok"))
	wantValue(t, c, pk("after_2m"), []byte("ok"))
}

func TestKeyLength(t *testing.T) {
	c := client(t)
	key := pk("k")
	key += strings.Repeat("k", 250-len(key))
	mustSet(t, c, key, []byte("v250"))
	wantValue(t, c, key, []byte("v250"))
	got, err := c.GetMulti([]string{key})
	if err != nil || len(got) != 1 || !bytes.Equal(got[key].Value, []byte("v250")) {
		t.Fatalf("get multi of a 250-byte key: %v, %v", got, err)
	}
	if err := c.Delete(key); err != nil {
		t.Fatalf("delete 250-byte key: %v", err)
	}
	wantErr(t, "set 251-byte key", c.Set(&memcache.Item{Key: key + "k", Value: []byte("v")}),
		memcache.ErrMalformedKey)
}

func TestFlags(t *testing.T) {
	c := client(t)
	for _, flags := range []uint32{0, 1, 12345, 1 << 16, 1 << 31, 1<<32 - 1} {
		if err := c.Set(&memcache.Item{Key: pk("flags"), Value: []byte("v"), Flags: flags}); err != nil {
			t.Fatal(err)
		}
		if it := wantValue(t, c, pk("flags"), []byte("v")); it.Flags != flags {
			t.Fatalf("flags %d came back as %d", flags, it.Flags)
		}
	}
}

func TestPing(t *testing.T) {
	if err := client(t).Ping(); err != nil {
		t.Fatalf("ping (version): %v", err)
	}
}
