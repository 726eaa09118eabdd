"""https:// upstreams with a configurable CA bundle, against a local self-signed server."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

import aiohttp
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from proxy.app import build_app
from proxy.app import serve as serve_proxy
from proxy.config import Settings
from replica_entry.sim import SimSettings, build_sim_app
from tests.support.calls import completion
from tests.support.fleet import FAST_HEALTH
from tests.support.servers import serve
from tests.support.waiting import eventually


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def test_https_replica_with_ca_bundle(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    async with serve(build_sim_app(SimSettings()), ssl_context=server_ctx) as replica_url:
        assert replica_url.startswith("https://")
        trusted = Settings.model_validate(
            {"replicas": [replica_url], "ca_bundle": str(cert), **FAST_HEALTH}
        )
        untrusted = Settings.model_validate({"replicas": [replica_url], **FAST_HEALTH})
        async with (
            serve_proxy(build_app(trusted)) as good_url,
            serve_proxy(build_app(untrusted)) as bad_url,
            aiohttp.ClientSession() as session,
        ):

            async def healthy(url: str) -> bool:
                async with session.get(url + "/health") as resp:
                    return resp.status == 200

            await eventually(lambda: healthy(good_url), what="the TLS replica admitted")
            async with session.post(good_url + "/v1/completions", json=completion()) as resp:
                assert resp.status == 200
            # Without the CA bundle the self-signed replica is never trusted, never admitted.
            assert not await healthy(bad_url)
