"""Message, Turn and Episode: the records that cross every module boundary."""

from teamrl.protocol.messages import (
    TAGS,
    Candidate,
    Episode,
    FormatError,
    Message,
    MessageKind,
    Turn,
    message_json_schema,
    parse_message,
    render_message,
)

__all__ = [
    "TAGS",
    "Candidate",
    "Episode",
    "FormatError",
    "Message",
    "MessageKind",
    "Turn",
    "message_json_schema",
    "parse_message",
    "render_message",
]
