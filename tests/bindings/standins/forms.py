"""Form bodies for the stand-ins (the test environment has no multipart library)."""

from __future__ import annotations

import email
import email.policy
from dataclasses import dataclass
from urllib.parse import parse_qsl


@dataclass(frozen=True)
class Part:
    name: str
    filename: str | None
    content_type: str
    data: bytes


def parse_urlencoded(body: bytes) -> dict[str, str]:
    return dict(parse_qsl(body.decode(), keep_blank_values=True))


def parse_multipart(content_type: str, body: bytes) -> list[Part]:
    """The parts of a `multipart/form-data` body, as a browser or httpx writes it."""
    message = email.message_from_bytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body, policy=email.policy.HTTP
    )
    parts: list[Part] = []
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        filename = part.get_param("filename", header="content-disposition")
        payload = part.get_payload(decode=True)
        parts.append(
            Part(
                name=str(name),
                filename=str(filename) if filename is not None else None,
                content_type=part.get_content_type(),
                data=payload if isinstance(payload, bytes) else b"",
            )
        )
    return parts
