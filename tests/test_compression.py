"""Pages, fragments and static files are compressed as the browser accepts: counts of bytes
and headers (the live feed's stream: tests/test_live_bytes.py)."""
import gzip
import time

import brotli
import pytest

from app.web import compress
from app.web.templating import STATIC


@pytest.mark.parametrize("header, coding", [
    ("gzip, deflate, br, zstd", "br"),
    ("gzip", "gzip"),
    ("br;q=0, gzip", "gzip"),
    ("br;q=0.5, gzip;q=0.8", "gzip"),
    ("*", "br"),
    ("br;q=0, *", "gzip"),
    ("identity", None),
    ("", None),
    ("gzip;q=0", None),
    ("gzip;q=nonsense, br", "br"),
])
def test_the_coding_follows_accept_encoding(header, coding):
    assert compress.chosen(header) == coding


def test_a_page_is_sent_as_br_or_gzip_as_accepted_and_the_same_once_decoded(client):
    plain = client.get("/", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers
    assert "accept-encoding" in plain.headers["vary"].lower()
    for coding, decode in (("br", brotli.decompress), ("gzip", gzip.decompress)):
        r = client.get("/", headers={"Accept-Encoding": coding})
        assert r.headers["content-encoding"] == coding
        assert "accept-encoding" in r.headers["vary"].lower()
        assert r.text == plain.text  # httpx decoded it
        assert int(r.headers["content-length"]) < len(plain.content) / 2
        assert decode(compress.compressed(plain.content, coding)) == plain.content


def test_static_files_are_compressed_once_each_with_its_own_etag(client):
    found = {}
    for coding in ("br", "gzip", "identity"):
        r = client.get("/static/htmx.min.js", headers={"Accept-Encoding": coding})
        assert r.status_code == 200
        assert r.headers.get("content-encoding", "identity") == coding
        assert r.headers["cache-control"] == "max-age=3600"
        assert "accept-encoding" in r.headers["vary"].lower()
        assert r.content == (STATIC / "htmx.min.js").read_bytes()
        found[coding] = (r.headers["etag"], int(r.headers.get("content-length", len(r.content))))
        again = client.get("/static/htmx.min.js", headers={"Accept-Encoding": coding,
                                                           "If-None-Match": r.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
    assert len({tag for tag, _ in found.values()}) == 3, found
    assert found["br"][1] < found["gzip"][1] < found["identity"][1] / 2
    # an ETag of another representation is no match
    other = client.get("/static/htmx.min.js", headers={"Accept-Encoding": "br", "If-None-Match": found["gzip"][0]})
    assert other.status_code == 200
    # once: the same compressed bytes are handed out again, not made again
    first = compress.static_file(STATIC, "app.css")[1]
    assert compress.static_file(STATIC, "app.css")[1] is first


def test_a_changed_static_file_gets_new_bytes_and_a_new_etag(tmp_path):
    (tmp_path / "a.css").write_text("body { color: red }\n" * 100)
    _, first = compress.static_file(tmp_path, "a.css")
    time.sleep(0.01)
    (tmp_path / "a.css").write_text("body { color: blue }\n" * 100)
    _, second = compress.static_file(tmp_path, "a.css")
    assert second.tag != first.tag
    assert gzip.decompress(second.bodies["gzip"]) == (tmp_path / "a.css").read_bytes()


@pytest.mark.parametrize("name", ["../app/config.py", "ext/../../README.md", "", "/etc/passwd", "nope.css", "ext"])
def test_static_files_stay_inside_the_folder(client, name):
    assert client.get(f"/static/{name}").status_code == 404
