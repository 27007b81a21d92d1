"""Real credentials for auth tests: tokens signed in the test, and a JWKS served over real HTTP."""

import json
import socket
import time
from typing import Any

import attrs
import hypercorn.trio
import jwt
import trio
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypercorn.config import Config

SECRET = b"test-secret-that-is-long-enough-for-hs256"


def mint(
    sub: str | None = "alice",
    org: str | None = "acme",
    *,
    expires_in: float = 300,
    key: Any = SECRET,
    algorithm: str = "HS256",
    kid: str | None = None,
    **claims: Any,
) -> str:
    payload: dict[str, Any] = {"exp": int(time.time() + expires_in), **claims}
    if sub is not None:
        payload["sub"] = sub
    if org is not None:
        payload["org_id"] = org
    return jwt.encode(payload, key, algorithm=algorithm, headers={"kid": kid} if kid else None)


def unsigned(sub: str = "alice", org: str = "acme") -> str:
    """A token with `alg: none`, which must never be accepted."""
    return jwt.encode({"sub": sub, "org_id": org}, None, algorithm="none")


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@attrs.define
class SigningKey:
    kid: str
    private: Any
    algorithm: str

    @classmethod
    def rsa(cls, kid: str) -> "SigningKey":
        return cls(kid, rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256")

    @classmethod
    def ec(cls, kid: str) -> "SigningKey":
        return cls(kid, ec.generate_private_key(ec.SECP256R1()), "ES256")

    def jwk(self) -> dict[str, Any]:
        algorithm = jwt.algorithms.RSAAlgorithm if self.algorithm == "RS256" else jwt.algorithms.ECAlgorithm
        document = algorithm.to_jwk(self.private.public_key(), as_dict=True)
        return {**document, "kid": self.kid, "alg": self.algorithm, "use": "sig"}

    def mint(self, **kwargs: Any) -> str:
        return mint(key=self.private, algorithm=self.algorithm, kid=self.kid, **kwargs)


@attrs.define
class JwksServer:
    """A JWKS endpoint on 127.0.0.1, whose keys, health and speed the test controls."""

    keys: list[SigningKey]
    failing: bool = False
    delay: float = 0.0  # seconds before each answer: a hanging endpoint
    fetches: int = 0
    url: str = ""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                if (await receive())["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
                await send({"type": "lifespan.startup.complete"})
        self.fetches += 1
        await trio.sleep(self.delay)
        status, body = (
            (500, b"boom") if self.failing else (200, json.dumps({"keys": [k.jwk() for k in self.keys]}).encode())
        )
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
        )
        await send({"type": "http.response.body", "body": body})

    async def start(self, nursery: trio.Nursery) -> None:
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.accesslog = None
        binds = await nursery.start(hypercorn.trio.serve, self, config)
        self.url = binds[0] + "/jwks.json"


def closed_port_url() -> str:
    """A local URL nothing listens on: the port was just free and is closed again."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/jwks.json"
