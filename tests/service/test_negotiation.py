"""service.responses.negotiation: the output format from ``?format=`` and ``Accept`` (RFC 9110
section 12.5.1), and a request's negotiation as one value.

Moved from tests/service/test_formats.py with the rule itself (issue 38); the hand-worked
answers are unchanged.
"""

from __future__ import annotations

import pytest
from starlette.requests import Request

from service.formats import FORMAT_MEDIA_TYPES, NotAcceptable
from service.query import OutputOptions
from service.responses.negotiation import Negotiated, negotiate, negotiate_output, streams_in

ALL_MEDIA = list(FORMAT_MEDIA_TYPES.values())


@pytest.mark.parametrize("accept", [None, "", "   ", "*/*", "*/*;q=0.3", "*"])
def test_no_accept_or_any_gives_json(accept):
    assert negotiate(accept, None) == "json"


@pytest.mark.parametrize(("fmt", "media"), list(FORMAT_MEDIA_TYPES.items()))
def test_each_media_type_selects_its_format(fmt, media):
    assert negotiate(media, None) == fmt
    assert negotiate(f"text/html, {media.upper()} ; q=0.7", None) == fmt


def test_format_parameter_wins_over_accept():
    assert negotiate("image/png", "npy") == "npy"
    assert negotiate("text/html", "json") == "json"  # Accept alone would be a 406
    assert negotiate(None, " Safetensors ") == "safetensors"


def test_unknown_format_lists_what_is_possible():
    with pytest.raises(NotAcceptable) as err:
        negotiate("application/json", "xml")
    assert err.value.available == ALL_MEDIA
    assert err.value.field == "format"
    assert "'xml'" in err.value.detail
    for key in FORMAT_MEDIA_TYPES:
        assert key in err.value.detail


def test_format_outside_the_endpoints_formats_is_406():
    with pytest.raises(NotAcceptable) as err:
        negotiate(None, "png", available=("json", "safetensors"))
    assert err.value.available == ["application/json", "application/vnd.safetensors"]


def test_q_values_rank_the_media_types():
    accept = "application/json;q=0.5, application/vnd.safetensors;q=0.9, image/png;q=0.7"
    assert negotiate(accept, None) == "safetensors"


def test_q_zero_excludes():
    assert negotiate("application/json;q=0, */*", None) == "safetensors"
    with pytest.raises(NotAcceptable):
        negotiate("*/*;q=0", None)
    with pytest.raises(NotAcceptable):
        negotiate("image/png;q=0", None)


def test_type_wildcards():
    assert negotiate("image/*", None) == "png"
    assert negotiate("application/*", None) == "json"  # a tie: the server's order decides
    assert negotiate("application/*;q=0.5, application/x-npy", None) == "npy"


def test_the_most_specific_range_sets_the_q_value():
    # json matches both ranges; its exact range (q=0.1) counts, not application/* (q=1).
    assert negotiate("application/*, application/json;q=0.1", None) == "safetensors"
    assert negotiate("*/*;q=0.1, image/png;q=0.2", None) == "png"
    assert negotiate("image/png;q=0, */*", None) == "json"
    assert negotiate("image/png;q=0, */*", None, available=("png", "raw")) == "raw"


def test_ties_keep_the_server_order():
    assert negotiate("image/png, application/x-npy", None) == "npy"
    assert negotiate("image/png, application/x-npy", None, available=("png", "npy")) == "png"


def test_a_browser_accept_header_gets_json():
    accept = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
    assert negotiate(accept, None) == "json"


def test_accept_that_matches_nothing_lists_the_available_types():
    with pytest.raises(NotAcceptable) as err:
        negotiate("text/html, text/csv;q=0.5", None)
    assert err.value.available == ALL_MEDIA
    assert err.value.field == "Accept"
    assert "text/html" in err.value.detail
    assert all(media in err.value.detail for media in ALL_MEDIA)


def test_malformed_ranges_are_skipped_and_malformed_q_values_count_as_1():
    """RFC 9110: a malformed parameter must not make an acceptable type unacceptable."""
    assert negotiate("garbage, application/x-npy", None) == "npy"
    assert negotiate("application/json;q=abc, image/png;q=0.4", None) == "json"
    assert negotiate("image/png;q=0.4, application/x-npy;q=abc", None) == "npy"
    assert negotiate("application/json;q=2, image/png;q=0.4", None) == "json"
    assert negotiate("application/json; charset=utf-8", None) == "json"
    for odd in ("abc", "", "-1", "nan", "inf", "1e-3", "0x1", "0.5.5", " ", "1,0"):
        assert negotiate(f"image/png;q={odd}, application/x-npy;q=0.9", None) == "png", odd
    # well-formed weights keep their meaning, including a quoted one and q=0
    assert negotiate('image/png;q="0.1", application/x-npy;q=0.9', None) == "npy"
    assert negotiate("image/png;q=.5, application/x-npy;q=0.49", None) == "png"
    assert negotiate("image/png;q=0., application/x-npy;q=0.001", None) == "npy"
    with pytest.raises(NotAcceptable):
        negotiate("application/json;q=0.000, image/png;q=0, */*;q=0", None)


# --------------------------------------------------------------------------------------------
# negotiate_output: a request negotiated once, as one value
# --------------------------------------------------------------------------------------------


def _request(accept: str | None = None) -> Request:
    headers = [] if accept is None else [(b"accept", accept.encode())]
    return Request({"type": "http", "method": "POST", "headers": headers, "query_string": b""})


def test_negotiate_output_keeps_encoding_and_index_for_their_format_only():
    out = OutputOptions(format=None, encoding="base64", index=2)
    assert negotiate_output(_request(), out) == Negotiated("json", True, None)
    assert negotiate_output(_request("image/png"), out) == Negotiated("png", False, 2)
    assert negotiate_output(_request("application/x-npy"), out) == Negotiated("npy", False, None)
    plain = OutputOptions(format="json", encoding=None, index=None)
    assert negotiate_output(_request("image/png"), plain) == Negotiated("json", False, None)
    assert Negotiated("npy").media_type == "application/x-npy"


def test_a_refusal_is_returned_to_be_raised_later():
    got = negotiate_output(_request("text/html"), OutputOptions(None, None, None))
    assert isinstance(got, NotAcceptable)
    assert got.field == "Accept" and got.available == ALL_MEDIA and "'text/html'" in got.detail
    bad = negotiate_output(_request(), OutputOptions("xml", None, None))
    assert isinstance(bad, NotAcceptable) and bad.field == "format"
    assert not streams_in(got) and not streams_in(bad)


@pytest.mark.parametrize(
    ("fmt", "streams"),
    [("raw", True), ("npy", True), ("safetensors", True), ("json", False), ("png", False)],
)
def test_streams_in_names_the_formats_a_table_streams_in(fmt, streams):
    assert streams_in(Negotiated(fmt)) is streams
