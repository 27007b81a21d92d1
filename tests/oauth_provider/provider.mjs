// A real OAuth 2.1 / OpenID Connect authorization server for the integration tests: oidc-provider 9 on
// 127.0.0.1, with just enough configuration for what the tests exercise (authorization code + PKCE S256,
// open dynamic client registration, rotating refresh tokens, client credentials, RFC 8707 resource
// indicators with JWT access tokens, RFC 9207 `iss`) and plain HTML login/consent pages that headless
// Chromium drives with simple selectors. Everything lives in memory and dies with the process.
//
//   node provider.mjs [port]     (port 0 or none: any free port)
//
// Prints `ISSUER: http://127.0.0.1:<port>` on stdout once listening. Environment:
//   ACCESS_TOKEN_TTL   seconds an access token lives (default 3600), so a test can watch one expire
//   SSO_CLIENT_ID, SSO_CLIENT_SECRET, SSO_REDIRECT_URIS (comma separated), SSO_TOKEN_AUTH_METHOD
//                      (default client_secret_basic): one pre-registered confidential client, for console SSO
//   METADATA_DOCUMENTS=1  an https URL is a client id (client ID metadata documents, draft-02), fetched from
//                      loopback too: the tests' client serves its document on 127.0.0.1 (behind TLS whose
//                      certificate NODE_EXTRA_CA_CERTS trusts), which oidc-provider's SSRF guard would refuse
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';

import Provider, { errors } from 'oidc-provider';

const env = process.env;
const accessTokenTTL = Number(env.ACCESS_TOKEN_TTL || 3600);
const RESOURCE_SCOPES = ['orders:read', 'orders:write'];
const NARROW_SCOPES = new Set(['orders:read']); // what the "narrow" consent grants of RESOURCE_SCOPES

const escape = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const errorHtml = (out) => `<!doctype html><title>Error</title><pre id="error">${escape(JSON.stringify(out))}</pre>`;

// Listen first: the issuer must carry the port, and port 0 only becomes a port once bound.
const server = createServer();
await new Promise((resolve) => server.listen(Number(process.argv[2] ?? env.PORT ?? 0), '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

// Any login name is an account. `org` is a custom claim (the email domain's first label), as an
// organisation-aware SSO would map it.
function account(login) {
  const email = login.includes('@') ? login : `${login}@acme.test`;
  const org = email.split('@')[1].split('.')[0];
  return {
    accountId: login,
    claims: async () => ({ sub: login, email, email_verified: true, name: login, org }),
  };
}

// A fresh signing key per run (oidc-provider's built-in development keys come with a loud warning).
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: 'test-signing-key', use: 'sig', alg: 'RS256' };

const ssoClient = env.SSO_CLIENT_ID && {
  client_id: env.SSO_CLIENT_ID,
  client_secret: env.SSO_CLIENT_SECRET,
  redirect_uris: (env.SSO_REDIRECT_URIS ?? '').split(',').filter(Boolean),
  grant_types: ['authorization_code', 'refresh_token'],
  response_types: ['code'],
  token_endpoint_auth_method: env.SSO_TOKEN_AUTH_METHOD || 'client_secret_basic',
};

const metadataDocuments = env.METADATA_DOCUMENTS === '1';

const provider = new Provider(issuer, {
  // Loopback fetches for metadata documents: the default fetch, without oidc-provider's special-use-IP guard.
  ...(metadataDocuments && { fetch: (url, { dispatcher, ...options }) => globalThis.fetch(url, options) }),
  clients: ssoClient ? [ssoClient] : [],
  // A client registering without grant_types may refresh (RFC 7591's default is authorization_code alone).
  clientDefaults: {
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
    id_token_signed_response_alg: 'RS256',
  },
  responseTypes: ['code'], // OAuth 2.1: no implicit or hybrid flows
  clientAuthMethods: ['none', 'client_secret_basic', 'client_secret_post'],
  // Scopes named here are supported (discovery's scopes_supported, and allowed in a registration's `scope`).
  scopes: ['openid', 'offline_access', ...RESOURCE_SCOPES],
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name', 'org'], org: ['org'] },
  // Put the granted claims (email, org) in the ID token too, not only at userinfo: an SSO client may read either.
  conformIdTokenClaims: false,
  cookies: { keys: [randomBytes(32).toString('hex')] },
  // The default error page pulls a web font from the internet; this one is plain, and `#error` marks it.
  renderError: async (ctx, out) => {
    ctx.type = 'html';
    ctx.body = errorHtml(out);
  },
  jwks: { keys: [signingKey] },
  findAccount: (ctx, sub) => account(sub),
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  pkce: { required: () => true }, // OAuth 2.1: every client, confidential too; S256 is all v9 knows
  // A refresh token for every client allowed the grant, without offline_access (which oidc-provider drops
  // from OIDC requests unless prompt=consent); rotated on every use, and a rotated one presented again
  // revokes the whole grant (oidc-provider's reuse detection).
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
  rotateRefreshToken: true,
  ttl: { AccessToken: accessTokenTTL, ClientCredentials: accessTokenTTL },
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true }, // open: no initial access token
    clientCredentials: { enabled: true },
    introspection: { enabled: true },
    revocation: { enabled: true },
    clientIdMetadataDocument: { enabled: metadataDocuments, ack: 'draft-02' },
    resourceIndicators: {
      enabled: true,
      // Any loopback URL is a resource server taking the orders scopes, with JWT access tokens whose `aud`
      // is the resource, signed with the key at jwks_uri.
      getResourceServerInfo: async (ctx, resource) => {
        if (new URL(resource).host.split(':')[0] !== '127.0.0.1') throw new errors.InvalidTarget();
        return {
          scope: RESOURCE_SCOPES.join(' '),
          audience: resource,
          accessTokenTTL,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        };
      },
      // A refresh (or code exchange) without `resource` gets a token for the resource granted.
      useGrantedResource: async () => true,
    },
  },
});

// Test-only counters and indexes, fed by oidc-provider's events and middleware.
const tokenRequests = {}; // grant_type -> token endpoint requests, successful or not
const grantsBySub = new Map(); // account -> grant ids, for /test/revoke-refresh-tokens
provider.on('grant.saved', (grant) => {
  if (!grantsBySub.has(grant.accountId)) grantsBySub.set(grant.accountId, new Set());
  grantsBySub.get(grant.accountId).add(grant.jti);
});
provider.use(async (ctx, next) => {
  try {
    await next();
  } finally {
    if (ctx.oidc?.route === 'token') {
      const grantType = ctx.oidc.params?.grant_type ?? 'unknown';
      tokenRequests[grantType] = (tokenRequests[grantType] ?? 0) + 1;
    }
  }
});

// A browser carrying the INTERCEPT cookie (tests/oauth_provider.py sets it) is shown the authorization response
// as a link instead of being redirected to the client: the test reads code, state and iss off the page, and
// neither the browser nor anything else reaches the redirect URI (which need not even be served).
const INTERCEPT = 'intercept-authorization-response';
provider.use(async (ctx, next) => {
  await next();
  const location = ctx.response.get('location');
  if (
    ['authorization', 'resume'].includes(ctx.oidc?.route) && ctx.status === 303
    && ctx.cookies.get(INTERCEPT, { signed: false }) && new URL(location, issuer).origin !== issuer
  ) {
    ctx.status = 200;
    ctx.type = 'html';
    ctx.body = `<!doctype html><title>Authorization response</title>
      <a id="authorization-response" href="${escape(location)}">${escape(location)}</a>`;
  }
});

function page(res, title, body) {
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
  res.end(`<!doctype html><html><head><title>${escape(title)}</title></head><body>${body}</body></html>`);
}

function json(res, status, value) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(value));
}

async function form(req) {
  let body = '';
  for await (const chunk of req) body += chunk;
  return new URLSearchParams(body);
}

async function showInteraction(req, res, uid) {
  const { prompt, params } = await provider.interactionDetails(req, res);
  if (prompt.name === 'login') {
    return page(res, 'Sign in', `<h1>Sign in to ${escape(params.client_id)}</h1>
      <form method="post" action="/interaction/${uid}/login">
        <input type="text" name="login" autofocus required> <button type="submit" id="submit">Sign in</button>
      </form>`);
  }
  return page(res, 'Consent', `<h1>${escape(params.client_id)} asks for</h1><p id="scope">${escape(params.scope ?? '')}</p>
    <form method="post" action="/interaction/${uid}/consent">
      <button type="submit" id="consent">Allow all</button>
      <button type="submit" id="consent-narrow" name="narrow" value="1">Allow ${[...NARROW_SCOPES].join(' ')} only</button>
    </form>`);
}

// Grant what the consent prompt found missing: all of it, or (narrow) none of the resource scopes beyond
// NARROW_SCOPES. The refused ones are recorded as rejected, else the prompt would ask again forever.
async function consent(req, res, narrow) {
  const { prompt: { details }, params, session, grantId } = await provider.interactionDetails(req, res);
  const grant = grantId
    ? await provider.Grant.find(grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  const refused = (scope) => narrow && RESOURCE_SCOPES.includes(scope) && !NARROW_SCOPES.has(scope);
  const split = (scopes) => [scopes.filter((s) => !refused(s)), scopes.filter(refused)];
  const [oidcGranted, oidcRefused] = split(details.missingOIDCScope ?? []);
  if (oidcGranted.length) grant.addOIDCScope(oidcGranted);
  if (oidcRefused.length) grant.rejectOIDCScope(oidcRefused);
  if (details.missingOIDCClaims) grant.addOIDCClaims(details.missingOIDCClaims);
  for (const [resource, scopes] of Object.entries(details.missingResourceScopes ?? {})) {
    const [granted, refusedHere] = split(scopes);
    if (granted.length) grant.addResourceScope(resource, granted);
    if (refusedHere.length) grant.rejectResourceScope(resource, refusedHere);
  }
  await provider.interactionFinished(req, res, { consent: { grantId: await grant.save() } });
}

// Every refresh token, access token, code and grant of one account: as if the user revoked the app.
async function revokeRefreshTokens(sub) {
  const grants = [...(grantsBySub.get(sub) ?? [])];
  for (const grantId of grants) {
    await Promise.all([provider.RefreshToken, provider.AccessToken, provider.AuthorizationCode].map(
      (model) => model.revokeByGrantId(grantId),
    ));
    await provider.Grant.adapter.destroy(grantId);
  }
  grantsBySub.delete(sub);
  return grants.length;
}

// Our routes (interaction pages, /test/ admin) first; everything else is oidc-provider's.
const callback = provider.callback();
server.on('request', async (req, res) => {
  const url = new URL(req.url, issuer);
  const interaction = url.pathname.match(/^\/interaction\/([\w-]+)(?:\/(login|consent))?$/);
  try {
    if (interaction && req.method === 'GET' && !interaction[2]) {
      await showInteraction(req, res, interaction[1]);
    } else if (interaction && req.method === 'POST' && interaction[2] === 'login') {
      const login = (await form(req)).get('login')?.trim();
      if (!login) return page(res, 'Sign in', '<p>a login name is required</p>');
      await provider.interactionFinished(req, res, { login: { accountId: login } }, { mergeWithLastSubmission: false });
    } else if (interaction && req.method === 'POST' && interaction[2] === 'consent') {
      await consent(req, res, (await form(req)).get('narrow') === '1');
    } else if (url.pathname === '/test/revoke-refresh-tokens' && req.method === 'POST') {
      json(res, 200, { revoked_grants: await revokeRefreshTokens(url.searchParams.get('sub') ?? '') });
    } else if (url.pathname === '/test/stats' && req.method === 'GET') {
      json(res, 200, tokenRequests);
    } else {
      callback(req, res);
    }
  } catch (error) {
    // An expired or unknown interaction, mostly: say so, for the test's failure message.
    console.error(error);
    if (res.headersSent) return;
    res.writeHead(400, { 'content-type': 'text/html; charset=utf-8' });
    res.end(errorHtml({ error: error.name, error_description: error.message }));
  }
});

console.log(`ISSUER: ${issuer}`);
