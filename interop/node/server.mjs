// A real @api.global/typedrequest TypedRouter behind a bare node:http server.
//
// POST /typedrequest answers JSON.stringify(await router.routeAndAddResponse(body)) -- the
// library decides the wire, this file only adds transport. Fault paths, for the rows of
// CONTRACT.md §1's failure table that a well-behaved client cannot provoke on its own:
//   POST /strip-correlation/typedrequest  deletes `correlation` before routing (the real
//                                         router then answers `null`)
//   POST /http-500/typedrequest           HTTP 500, no envelope
//   POST /http-400/typedrequest           HTTP 400 {"error":"Invalid request"} (what a
//                                         malformed body gets; a correct client never sees it)
//   any non-JSON body                     HTTP 400 {"error":"Invalid request"}
//   HEAD /typedrequest                    200 (liveness)
//
// Usage: node server.mjs   -> prints {"port": N} on stdout once listening on 127.0.0.1:N.
// With $INTEROP_TLS_CERT and $INTEROP_TLS_KEY (PEM paths) it serves HTTPS instead.
// The machine token accepted by getIdentityByToken is $INTEROP_TOKEN (default below).

import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import * as tr from '@api.global/typedrequest';

// The library logs with console.log (unknown methods, handler crashes, "weirdly shaped
// request"); keep stdout for the port line only.
console.log = (...args) => console.error(...args);

const TOKEN = process.env.INTEROP_TOKEN || 'interop-token';
const router = new tr.TypedRouter();

/** Every routed envelope, in arrival order: {method, correlationId, phase}. */
const seen = [];
router.setHooks({
  onIncomingRequest: (entry) =>
    seen.push({ method: entry.method, correlationId: entry.correlationId }),
});

const identity = () => ({
  name: 'interop-bot',
  userId: 'user-interop',
  type: 'machine',
  role: 'admin',
  expiresAt: Date.now() + 3600_000,
  jwt: 'jwt-interop',
});

const requireIdentity = (req) => {
  if (!req?.identity || req.identity.jwt !== 'jwt-interop') {
    throw new tr.TypedResponseError('identity missing or invalid', { code: 'UNAUTHORIZED' });
  }
};

const SERVICES = {
  'svc-checkout': {
    id: 'svc-checkout',
    data: { name: 'checkout', egress: [{ host: 'api.stripe.com', port: 443 }], egressRevision: 1 },
  },
};

// serve.zone identity exchange, so the Python client can do its normal flow.
router.addTypedHandler(
  new tr.TypedHandler('getIdentityByToken', async (req) => {
    if (req?.token !== TOKEN) {
      throw new tr.TypedResponseError('invalid token', { code: 'UNAUTHORIZED' });
    }
    return { identity: identity() };
  }),
);

// Success, and a TypedResponseError carrying data.code.
router.addTypedHandler(
  new tr.TypedHandler('getServiceById', async (req) => {
    requireIdentity(req);
    const service = SERVICES[req.serviceId];
    if (!service) {
      throw new tr.TypedResponseError(`service ${req.serviceId} not found`, {
        code: 'SERVICE_NOT_FOUND',
        serviceId: req.serviceId,
      });
    }
    return { service };
  }),
);

// Echo: returns the request payload (without identity) as the response.
router.addTypedHandler(
  new tr.TypedHandler('echo', async (req) => {
    const { identity: _identity, ...rest } = req ?? {};
    return { echo: rest };
  }),
);

// Throws TypedResponseError with whatever {text, data} the caller asks for; data may be
// omitted to see what the library sends then (it drops the key: `error: {text}`).
router.addTypedHandler(
  new tr.TypedHandler('failWith', async (req) => {
    if (req && 'data' in req) throw new tr.TypedResponseError(req.text ?? 'failed', req.data);
    throw new tr.TypedResponseError(req?.text ?? 'failed');
  }),
);

// A plain Error in a handler: the library swallows it (console.log) and answers
// `response: null` with no `error` -- the "failed silently upstream" row.
router.addTypedHandler(
  new tr.TypedHandler('crash', async () => {
    throw new Error('handler crashed');
  }),
);

// A handler returning nothing: also `response: null`, no `error`.
router.addTypedHandler(new tr.TypedHandler('returnNothing', async () => undefined));

// Retry. TypedHandler cannot express `retry` (it only sets `response`/`error`); the field
// exists in ITypedRequest and the TypedRequest *client* honours it. Router middleware is
// the only library hook that sees the envelope itself, so it sets `retry` there for the
// first `request.failTimes` deliveries of a correlation id (default 2), and the handler
// then leaves `response` unset. With `request.alsoError` it sends `error` as well, which
// CONTRACT.md says never happens -- kept to document how the real client reacts.
const retryCounts = new Map();
router.addMiddleware(async (envelope) => {
  if (envelope.method !== 'flaky') return;
  const id = envelope.correlation?.id ?? '';
  const n = (retryCounts.get(id) ?? 0) + 1;
  retryCounts.set(id, n);
  const failTimes = envelope.request?.failTimes ?? 2;
  if (n <= failTimes) {
    envelope.retry = { waitForMs: envelope.request?.waitForMs ?? 50, reason: `warming up (${n})` };
    if (envelope.request?.alsoError) {
      envelope.error = { text: 'busy', data: { code: 'BUSY' } };
    }
    envelope.localData.retrying = true;
  }
});
router.addTypedHandler(
  new tr.TypedHandler('flaky', async (req, tools) => {
    if (tools?.localData?.retrying) return undefined;
    return { ok: true, attempts: (req?.failTimes ?? 2) + 1 };
  }),
);

// Test introspection: what the router has seen (method + correlation id per delivery).
router.addTypedHandler(new tr.TypedHandler('interopSeen', async () => ({ seen: [...seen] })));

const readBody = (req) =>
  new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });

const send = (res, status, text) => {
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
};

const handle = async (req, res) => {
  try {
    const url = new URL(req.url, 'http://127.0.0.1');
    const path = url.pathname;
    if (!path.endsWith('/typedrequest')) return send(res, 404, '{"error":"Not found"}');
    if (req.method === 'HEAD') return send(res, 200, '');
    if (req.method !== 'POST') return send(res, 405, '{"error":"Method not allowed"}');
    const raw = await readBody(req);
    let body;
    try {
      body = JSON.parse(raw);
    } catch {
      return send(res, 400, '{"error":"Invalid request"}');
    }
    if (path === '/http-500/typedrequest') return send(res, 500, '{"error":"Internal"}');
    if (path === '/http-400/typedrequest') return send(res, 400, '{"error":"Invalid request"}');
    if (path === '/strip-correlation/typedrequest' && body && typeof body === 'object') {
      delete body.correlation;
    }
    const reply = await router.routeAndAddResponse(body);
    return send(res, 200, JSON.stringify(reply));
  } catch (err) {
    console.error('server error:', err);
    if (!res.headersSent) send(res, 500, '{"error":"Internal"}');
  }
};

const tls = process.env.INTEROP_TLS_CERT && process.env.INTEROP_TLS_KEY;
const server = tls
  ? https.createServer(
      {
        cert: fs.readFileSync(process.env.INTEROP_TLS_CERT),
        key: fs.readFileSync(process.env.INTEROP_TLS_KEY),
      },
      handle,
    )
  : http.createServer(handle);

server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ port: server.address().port })}\n`);
});

const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
