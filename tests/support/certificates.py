"""PEM files of certificates and keys made by tests (with the `cryptography` package)."""

from __future__ import annotations

import os
from typing import Any


def write_pem(folder: str, stem: str, cert: Any, key: Any) -> tuple[str, str]:
    """Write `cert` and its private `key` (cryptography objects) as `<stem>.crt` and
    `<stem>.key` in `folder`; returns their paths."""
    from cryptography.hazmat.primitives import serialization

    cert_path, key_path = os.path.join(folder, f"{stem}.crt"), os.path.join(folder, f"{stem}.key")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    return cert_path, key_path
