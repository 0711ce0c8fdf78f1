// memjs (binary protocol) against the server in MEMCACHED_SERVERS (host:port).
// tests/clients/test_node.py runs this file with `node --test` once against
// genuine memcached and once against osmium; every expectation is what
// memcached 1.6 answers. SASL cases use MEMCACHED_SASL_SERVERS/_USER/_PASSWORD
// (or fail with MEMCACHED_SASL_ERROR, why no SASL server could be started).
//
// memjs has no cas, no multi-get and no ascii mode; "multi-get" here is 100
// gets pipelined on one connection. Keys carry a per-run prefix so the suite
// can be rerun against the same server and share it with other suites.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const memjs = require('memjs');

const RUN = Date.now().toString(36);
const k = (name) => `nd${RUN}_${name}`;
const quiet = { log() {} };

const ALL_BYTES = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
const TRICKY = Buffer.from('a\r\nEND\r\nb\r\nVALUE x 0 1\r\n\r\n\x00', 'latin1');

function env(name) {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set (run this suite via tests/clients/test_node.py)`);
  }
  return v;
}

function connect(servers, options = {}) {
  return memjs.Client.create(servers, {
    timeout: 5,
    conntimeout: 5,
    retries: 1,
    logger: quiet,
    ...options,
  });
}

// Serializer that lets a test choose the flags of a stored item: store
// {data: Buffer, flags: n}; get returns the value and the flags as a number.
const flagsSerializer = {
  serialize(opcode, value, extras) {
    if (value && value.data !== undefined) {
      extras = Buffer.from(extras);
      extras.writeUInt32BE(value.flags >>> 0, 0);
      value = value.data;
    }
    return { value, extras };
  },
  deserialize(opcode, value, extras) {
    return { value, extras: extras && extras.length >= 4 ? extras.readUInt32BE(0) : extras };
  },
};

let mc;
test.before(() => {
  mc = connect(env('MEMCACHED_SERVERS'));
});
test.after(() => {
  if (mc) mc.close();
});

async function wantValue(key, want) {
  const { value } = await mc.get(key);
  assert.ok(value !== null, `get ${key}: miss`);
  assert.deepEqual(value, Buffer.from(want), `get ${key}`);
}

async function wantMiss(key) {
  const { value } = await mc.get(key);
  assert.equal(value, null, `get ${key} should miss`);
}

async function rejects(promise, message) {
  await assert.rejects(promise, (err) => {
    assert.equal(err.message, message);
    return true;
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test('set/get', async () => {
  assert.equal(await mc.set(k('a'), 'hello'), true);
  await wantValue(k('a'), 'hello');
  assert.equal(await mc.set(k('a'), Buffer.from('world')), true);
  await wantValue(k('a'), 'world');
  await wantMiss(k('missing'));
  assert.equal(await mc.set(k('empty'), ''), true);
  await wantValue(k('empty'), '');
});

test('add/replace', async () => {
  assert.equal(await mc.add(k('add'), '1'), true);
  // memjs resolves a refused add with false
  assert.equal(await mc.add(k('add'), '2'), false);
  await wantValue(k('add'), '1');

  assert.equal(await mc.replace(k('repl'), '1'), false);
  await wantMiss(k('repl'));
  await mc.set(k('repl'), '1');
  assert.equal(await mc.replace(k('repl'), '2'), true);
  await wantValue(k('repl'), '2');
});

// memjs 1.3.2's prepend() sends opcode 0x0E, APPEND (not 0x0F, PREPEND), so
// it appends: the expectations below are what a memjs user gets.
test('append/prepend keep the flags', async () => {
  // memcached answers NOT_STORED (0x0005), which memjs reports as an error
  await rejects(mc.append(k('ap_missing'), 'x'), 'MemJS APPEND: Item not stored');
  await rejects(mc.prepend(k('ap_missing'), 'x'), 'MemJS PREPEND: Item not stored');
  await wantMiss(k('ap_missing'));

  const fc = connect(env('MEMCACHED_SERVERS'), { serializer: flagsSerializer });
  try {
    assert.equal(await fc.set(k('ap'), { data: Buffer.from('mid'), flags: 77 }), true);
    assert.equal(await mc.append(k('ap'), '_end'), true);
    assert.equal(await mc.prepend(k('ap'), '_more'), true);
    const { value, flags } = await fc.get(k('ap'));
    assert.deepEqual(value, Buffer.from('mid_end_more'));
    assert.equal(flags, 77);
    assert.equal(await mc.append(k('ap'), '\r\nEND\r\n'), true);
    await wantValue(k('ap'), 'mid_end_more\r\nEND\r\n');
  } finally {
    fc.close();
  }
});

test('increment/decrement', async () => {
  await mc.set(k('num'), '10');
  assert.deepEqual(await mc.increment(k('num'), 5, {}), { success: true, value: 15 });
  assert.deepEqual(await mc.decrement(k('num'), 3, {}), { success: true, value: 12 });
  assert.deepEqual(await mc.increment(k('num'), 0, {}), { success: true, value: 12 });
  await wantValue(k('num'), '12');

  await mc.set(k('grow'), '99');
  assert.equal((await mc.increment(k('grow'), 1, {})).value, 100);
  await wantValue(k('grow'), '100');

  // wrap at 2^64
  await mc.set(k('wrap'), '18446744073709551615');
  assert.equal((await mc.increment(k('wrap'), 1, {})).value, 0);
  await mc.set(k('wrap2'), '18446744073709551610');
  assert.equal((await mc.increment(k('wrap2'), 10, {})).value, 4);
  // rewritten in place: padded with spaces to the old length
  await wantValue(k('wrap2'), '4'.padEnd(20, ' '));

  // a shrinking counter is rewritten in place, padded with spaces
  await mc.set(k('pad'), '100');
  assert.equal((await mc.decrement(k('pad'), 1, {})).value, 99);
  await wantValue(k('pad'), '99 ');

  // decr clamps at 0
  await mc.set(k('clamp'), '5');
  assert.equal((await mc.decrement(k('clamp'), 10, {})).value, 0);
  assert.equal((await mc.decrement(k('clamp'), 1, {})).value, 0);

  // missing key: memjs always sends an initial value (default 0), which the
  // server stores
  assert.deepEqual(await mc.increment(k('missing'), 1, {}), { success: true, value: 0 });
  assert.deepEqual(await mc.increment(k('missing'), 1, {}), { success: true, value: 1 });
  assert.deepEqual(await mc.decrement(k('missing2'), 1, { initial: 7 }), { success: true, value: 7 });
  assert.deepEqual(await mc.decrement(k('missing2'), 1, { initial: 7 }), { success: true, value: 6 });
  await wantValue(k('missing2'), '6');

  // non-numeric value (status 0x0006)
  await mc.set(k('nan'), 'abc');
  await rejects(mc.increment(k('nan'), 1, {}), 'MemJS INCREMENT: Incr/Decr on non-numeric value');
  await rejects(mc.decrement(k('nan'), 1, {}), 'MemJS DECREMENT: Incr/Decr on non-numeric value');
  await mc.set(k('nan_long'), '184467440737095516150'); // 21 digits
  await rejects(mc.increment(k('nan_long'), 1, {}), 'MemJS INCREMENT: Incr/Decr on non-numeric value');
  await wantValue(k('nan'), 'abc');
});

test('delete', async () => {
  await mc.set(k('del'), 'x');
  assert.equal(await mc.delete(k('del')), true);
  await wantMiss(k('del'));
  assert.equal(await mc.delete(k('del')), false);
});

test('touch', async () => {
  await mc.set(k('touch'), 'x');
  assert.equal(await mc.touch(k('touch'), 100), true);
  await wantValue(k('touch'), 'x');
  assert.equal(await mc.touch(k('touch_missing'), 100), false);
});

test('100 pipelined gets', async () => {
  const want = new Map();
  for (let i = 0; i < 100; i++) {
    want.set(k(`multi_${String(i).padStart(3, '0')}`), Buffer.from(`value-${i}`.repeat(i + 1)));
  }
  await Promise.all([...want].map(([key, v]) => mc.set(key, v)));
  const keys = [...want.keys(), k('multi_missing_1'), k('multi_missing_2')];
  const got = await Promise.all(keys.map((key) => mc.get(key)));
  keys.forEach((key, i) => {
    if (want.has(key)) {
      assert.deepEqual(got[i].value, want.get(key), key);
    } else {
      assert.equal(got[i].value, null, key);
    }
  });

  // 100 keys of 250 bytes
  const long = [];
  for (let i = 0; i < 100; i++) {
    long.push(k(`long_${String(i).padStart(3, '0')}_`).padEnd(250, 'x'));
  }
  await Promise.all(long.map((key, i) => mc.set(key, String(i))));
  const gotLong = await Promise.all(long.map((key) => mc.get(key)));
  gotLong.forEach(({ value }, i) => assert.deepEqual(value, Buffer.from(String(i)), long[i]));
});

test('expiry', async () => {
  // ttl >= 2: memcached's clock ticks once a second
  await mc.set(k('exp_short'), 'x', { expires: 2 });
  await mc.set(k('exp_long'), 'x', { expires: 100 });
  await mc.set(k('exp_forever'), 'x');
  await mc.set(k('exp_touched_short'), 'x', { expires: 100 });
  assert.equal(await mc.touch(k('exp_touched_short'), 2), true);
  await mc.set(k('exp_touched_long'), 'x', { expires: 2 });
  assert.equal(await mc.touch(k('exp_touched_long'), 100), true);
  assert.equal(await mc.add(k('exp_add'), 'first', { expires: 2 }), true);
  await wantValue(k('exp_short'), 'x'); // 2 is relative, not a unix time

  await sleep(3100);

  await wantMiss(k('exp_short'));
  await wantMiss(k('exp_touched_short'));
  await wantMiss(k('exp_add'));
  await wantValue(k('exp_long'), 'x');
  await wantValue(k('exp_forever'), 'x');
  await wantValue(k('exp_touched_long'), 'x');

  // expired items neither block add nor satisfy replace/append/touch
  assert.equal(await mc.add(k('exp_add'), 'second'), true);
  await wantValue(k('exp_add'), 'second');
  assert.equal(await mc.replace(k('exp_short'), 'y'), false);
  await rejects(mc.append(k('exp_touched_short'), 'y'), 'MemJS APPEND: Item not stored');
  assert.equal(await mc.touch(k('exp_short'), 10), false);
});

test('binary values', async () => {
  await mc.set(k('bytes'), ALL_BYTES);
  await wantValue(k('bytes'), ALL_BYTES);
  await mc.set(k('tricky'), TRICKY);
  await wantValue(k('tricky'), TRICKY);
  await mc.set(k('end'), '\r\nEND\r\n');
  await wantValue(k('end'), '\r\nEND\r\n');
  const big = Buffer.concat(Array(1000).fill(ALL_BYTES));
  await mc.set(k('bytes_big'), big);
  await wantValue(k('bytes_big'), big);
});

test('1,000,000-byte value', async () => {
  const v = Buffer.alloc(1000000);
  for (let i = 0; i < v.length; i++) v[i] = i % 251;
  assert.equal(await mc.set(k('1m'), v), true);
  await wantValue(k('1m'), v);
});

test('2 MB value rejected', async () => {
  await mc.set(k('2m'), 'old');
  // status 0x0003 (E2BIG)
  await rejects(mc.set(k('2m'), Buffer.alloc(2 * 1024 * 1024, 'x')), 'MemJS SET: Value too large');
  // memcached unlinks the old item when a set fails for size
  await wantMiss(k('2m'));
  // the value was swallowed: the connection still works
  assert.equal(await mc.set(k('after_2m'), 'ok'), true);
  await wantValue(k('after_2m'), 'ok');
});

test('key length', async () => {
  const key = k('k').padEnd(250, 'k');
  assert.equal(await mc.set(key, 'v250'), true);
  await wantValue(key, 'v250');
  assert.equal(await mc.delete(key), true);
  // memjs does not check key length: the server refuses a 251-byte key
  // (status 0x0004) and then closes the connection, so this runs on a client
  // of its own, which is not used again.
  const own = connect(env('MEMCACHED_SERVERS'), { retries: 0 });
  try {
    await rejects(own.set(key + 'k', 'v'), 'MemJS SET: Invalid arguments');
  } finally {
    own.close();
  }
});

test('flags', async () => {
  const fc = connect(env('MEMCACHED_SERVERS'), { serializer: flagsSerializer });
  try {
    for (const flags of [0, 1, 12345, 2 ** 16, 2 ** 31, 2 ** 32 - 1]) {
      assert.equal(await fc.set(k('flags'), { data: Buffer.from('v'), flags }), true);
      const { value, flags: got } = await fc.get(k('flags'));
      assert.deepEqual(value, Buffer.from('v'));
      assert.equal(got, flags);
    }
  } finally {
    fc.close();
  }
});

test('stats', async () => {
  await mc.set(k('stats'), 'x');
  await wantValue(k('stats'), 'x');
  const stats = await new Promise((resolve, reject) => {
    mc.stats((err, server, s) => (err ? reject(err) : resolve(s)));
  });
  for (const name of ['pid', 'uptime', 'time', 'version', 'curr_connections',
    'total_connections', 'cmd_get', 'cmd_set', 'get_hits', 'get_misses', 'curr_items',
    'total_items', 'bytes', 'limit_maxbytes', 'threads', 'evictions']) {
    assert.ok(name in stats, `stats lack ${name}`);
  }
  assert.ok(Number(stats.pid) > 0);
  assert.ok(Number(stats.curr_items) >= 1);
  assert.ok(Number(stats.get_hits) >= 1);
  assert.equal(stats.limit_maxbytes, '67108864');
  assert.equal(stats.threads, '2');
  assert.match(stats.version, /^\d+\.\d+\.\d+\S*$/);
});

test('SASL PLAIN', async (t) => {
  const err = process.env.MEMCACHED_SASL_ERROR;
  if (err) {
    throw new Error(`no SASL server of kind ${process.env.MEMCACHED_KIND}: ${err}`);
  }
  const servers = env('MEMCACHED_SASL_SERVERS');
  const user = env('MEMCACHED_SASL_USER');
  const password = env('MEMCACHED_SASL_PASSWORD');

  await t.test('correct password', async () => {
    const c = connect(servers, { username: user, password });
    try {
      assert.equal(await c.set(k('sasl'), 'authenticated'), true);
      assert.deepEqual((await c.get(k('sasl'))).value, Buffer.from('authenticated'));
      assert.deepEqual(await c.increment(k('sasl_ctr'), 1, { initial: 5 }),
        { success: true, value: 5 });
    } finally {
      c.close();
    }
  });

  await t.test('wrong password', async () => {
    const c = connect(servers, { username: user, password: password + '-wrong', retries: 0 });
    try {
      await assert.rejects(c.set(k('sasl_bad'), 'x'));
    } finally {
      c.close();
    }
    const good = connect(servers, { username: user, password });
    try {
      assert.equal((await good.get(k('sasl_bad'))).value, null);
    } finally {
      good.close();
    }
  });
});
