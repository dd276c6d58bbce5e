// The real @api.global/typedrequest TypedRequest client, for driving a control plane.
//
// Usage: node client.mjs URL METHOD [REQUEST_JSON | -] [--with-identity]
//   REQUEST_JSON defaults to {}; "-" reads it from stdin (keeps tokens off the argv).
//   --with-identity: first exchanges $RECONCILE_TOKEN via getIdentityByToken (through the same
//   library client) and puts the returned `identity` into the request.
// Prints one JSON line on stdout and exits 0 on success, 1 on a failure:
//   {"ok": true,  "response": <what TypedRequest.fire resolved to>}
//   {"ok": false, "errorClass": "TypedResponseError", "text": ..., "data": ...}
//   {"ok": false, "errorClass": "<Error subclass>", "message": ...}
// For HTTPS with a private CA, set NODE_EXTRA_CA_CERTS in the environment.

import * as tr from '@api.global/typedrequest';

// The library logs retries with console.log; keep stdout for the one result line.
console.log = (...args) => console.error(...args);

const out = (obj, code) => {
  process.stdout.write(`${JSON.stringify(obj)}\n`);
  process.exitCode = code;
};

const readStdin = async () => {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return Buffer.concat(chunks).toString('utf8');
};

const main = async () => {
  const args = process.argv.slice(2);
  const withIdentity = args.includes('--with-identity');
  const [url, method, requestArg = '{}'] = args.filter((a) => a !== '--with-identity');
  if (!url || !method) {
    process.stderr.write('usage: node client.mjs URL METHOD [REQUEST_JSON | -] [--with-identity]\n');
    process.exitCode = 64;
    return;
  }
  const request = JSON.parse(requestArg === '-' ? await readStdin() : requestArg);
  try {
    if (withIdentity) {
      const token = process.env.RECONCILE_TOKEN;
      if (!token) throw new Error('RECONCILE_TOKEN is not set');
      const exchange = new tr.TypedRequest(url, 'getIdentityByToken');
      const { identity } = await exchange.fire({ token });
      request.identity = identity;
    }
    const response = await new tr.TypedRequest(url, method).fire(request);
    out({ ok: true, response: response ?? null }, 0);
  } catch (err) {
    if (err instanceof tr.TypedResponseError) {
      out({ ok: false, errorClass: 'TypedResponseError', text: err.errorText, data: err.errorData ?? null }, 1);
    } else {
      // undici wraps network/TLS failures as TypeError("fetch failed") with the reason in
      // `cause` (e.g. code UNABLE_TO_VERIFY_LEAF_SIGNATURE); report code and message.
      const c = err?.cause;
      const cause = c ? [c.code, c.message ?? String(c)].filter(Boolean).join(': ') : undefined;
      out({ ok: false, errorClass: err?.constructor?.name ?? typeof err, message: String(err?.message ?? err), cause }, 1);
    }
  }
};

await main();
