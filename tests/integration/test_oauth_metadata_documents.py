"""A client ID metadata document end to end: the executor, served over https (Debian's nginx terminating TLS
with a certificate made for the test), is known to a real authorization server (npm oidc-provider with its
client ID metadata document support on) by its document's URL alone: no registration, no secret. The provider
fetches the document when the user signs in, checks it names its own URL and our callback, and the connection
made through it calls the API."""

import datetime
import ipaddress
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import attrs
import httpx
import jwt
import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.conftest import ServerUnderTest, jwt_server
from tests.integration.test_oauth_connections import ADMIN, READ, ResourceServer, World, orders_spec
from tests.nginx import nginx
from tests.oauth_provider import oauth_provider
from tests.recording_upstream import listen_port
from tests.upstream import start_upstream

pytestmark = pytest.mark.slow


def loopback_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "executor-mcp test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


def tls_front(port: int, cert: Path, key: Path, backend: str) -> str:
    return f"""server {{
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    location / {{
        proxy_pass {backend};
        proxy_set_header Host $http_host;
    }}
}}"""


@attrs.frozen
class HttpsWorld:
    world: World
    public: str  # https://127.0.0.1:<nginx>


@pytest.fixture
async def https_world(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> AsyncIterator[HttpsWorld]:
    cert, key = loopback_certificate(tmp_path)
    port = listen_port()
    public = f"https://127.0.0.1:{port}"
    async with (
        oauth_provider(metadata_documents_ca=cert) as provider,
        httpx.AsyncClient(timeout=30, verify=ssl.create_default_context(cafile=cert)) as http,
    ):
        discovery = (await http.get(provider.issuer + "/.well-known/openid-configuration")).json()
        resource = ResourceServer(provider.issuer)
        resource.keys = jwt.PyJWKSet.from_dict((await http.get(discovery["jwks_uri"])).json())
        resource.upstream = await start_upstream(nursery, resource.respond)
        executor: ServerUnderTest = await jwt_server(
            nursery, data_dir, tmp_path, allow_local_network=True, public_url=public
        )
        spec = orders_spec(resource.upstream.url, discovery["authorization_endpoint"], discovery["token_endpoint"])
        added = await http.post(
            executor.running.url + "/api/openapi/specs",
            json={"spec": {"kind": "blob", "value": json.dumps(spec)}, "slug": "orders"},
            headers=ADMIN,
        )
        assert added.status_code == 200, added.text
        async with nginx(tls_front(port, cert, key, executor.running.url), port):
            yield HttpsWorld(World((executor,), provider, resource.upstream, http, discovery), public)
        executor.running.stop.set()
        await executor.done.wait()


async def test_oauth_the_metadata_document_names_its_own_url_and_our_callback(https_world: HttpsWorld) -> None:
    http = https_world.world.http
    for path in ("/api/oauth/client-id-metadata.json", "/api/oauth/client-id-metadata/acme.json"):
        answer = await http.get(https_world.public + path)  # through TLS, with no credential
        assert answer.status_code == 200, answer.text
        assert answer.headers["cache-control"] == "public, max-age=300"
        assert answer.json() == {
            "client_id": https_world.public + path,
            "client_name": "executor-mcp",
            "client_uri": https_world.public,
            "redirect_uris": [https_world.public + "/api/oauth/callback"],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "application_type": "web",
        }
    assert (await http.get(https_world.public + "/api/oauth/client-id-metadata/..%2Fx.json")).status_code == 404


async def test_oauth_a_server_that_takes_metadata_documents_knows_us_by_ours(https_world: HttpsWorld) -> None:
    world = https_world.world
    assert world.discovery["client_id_metadata_document_supported"] is True
    body = {**world.registration(), "clientIdMetadataDocumentSupported": True}
    client = (await world.ok("POST", "/api/oauth/clients/register-dynamic", body))["client"]
    assert client.startswith("cimd-")
    assert (await world.ok("POST", "/api/oauth/clients/register-dynamic", body))["client"] == client  # reused
    (listed,) = await world.ok("GET", "/api/oauth/clients")
    assert listed["origin"] == {"kind": "client_id_metadata_document"}
    assert listed["clientId"] == https_world.public + "/api/oauth/client-id-metadata.json"
    # A registration endpoint is not needed, and an http callback would not do (the document lists ours alone).
    without = {key: value for key, value in body.items() if key != "registrationEndpoint"}
    assert (await world.ok("POST", "/api/oauth/clients/register-dynamic", without))["client"] == client
    started = await world.start(client)
    assert parse_qs(urlsplit(started["authorizationUrl"]).query)["client_id"] == [listed["clientId"]]
    answered = await world.provider.sign_in(started["authorizationUrl"], "alice@acme.test")
    params = {name: values[0] for name, values in parse_qs(urlsplit(answered).query).items()}
    assert answered.startswith(https_world.public + "/api/oauth/callback?")
    connection = await world.ok("POST", "/api/oauth/complete", params)
    assert connection["oauthClient"] == client
    result = await world.execute(READ)
    assert result["result"]["ok"] is True, result
    assert result["result"]["data"] == {"id": "7", "sub": "alice@acme.test"}
