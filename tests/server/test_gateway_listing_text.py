"""The listing's key text: the plain-key short cut writes exactly what percent-encoding and XML
escaping write (``lakefs_server.gateway.listing``)."""

from __future__ import annotations

from urllib.parse import quote
from xml.sax.saxutils import escape

from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_server.gateway.listing import _plain_text, _url_text
from tests.support.profiles import examples

_keys = st.text(st.sampled_from("aZ09_.~/-+ &<>%\"'é\U0001f600\x00\t?=#"), max_size=12) | st.text(max_size=12)


@settings(max_examples=examples(2), deadline=None)
@given(_keys)
def test_key_text_is_the_encoded_and_escaped_key(key: str) -> None:
    assert _url_text(key) == escape(quote(key, safe="/"))
    assert _plain_text(key) == escape(key)


def test_plain_keys_are_returned_as_they_are() -> None:
    key = "main/list/d000/f-00_1.~x"
    assert _url_text(key) is key and _plain_text(key) is key
    assert _url_text("a b+c&") == "a%20b%2Bc%26"
