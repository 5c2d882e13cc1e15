"""Throwaway TLS certificates for the tests that need them (librdkafka's SASL_SSL
configuration, a Redis served over TLS)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path


def write_test_certificates(directory: Path) -> dict[str, Path]:
    """A throwaway CA and a server and a client certificate signed by it (for 127.0.0.1 and
    localhost), valid for a day: ``ca``, ``server_cert``, ``server_key``, ``client_cert``,
    ``client_key`` paths in ``directory``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str,
                    issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool) -> x509.Certificate:
        builder = (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(name(issuer))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    paths = {"ca": directory / "ca.pem"}
    paths["ca"].write_bytes(certificate("test-ca", ca_key, "test-ca", ca_key, ca=True)
                            .public_bytes(serialization.Encoding.PEM))
    for role in ("server", "client"):
        key = ec.generate_private_key(ec.SECP256R1())
        paths[f"{role}_key"] = directory / f"{role}.key"
        paths[f"{role}_key"].write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption()))
        paths[f"{role}_cert"] = directory / f"{role}.pem"
        paths[f"{role}_cert"].write_bytes(certificate(role, key, "test-ca", ca_key, ca=False)
                                          .public_bytes(serialization.Encoding.PEM))
    return paths
