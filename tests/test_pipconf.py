"""lab/containers/pipconf.py: the host's pip settings carried into a build (network indexes kept, host paths noted)."""

from __future__ import annotations

from lab.containers import pipconf


PIP_LIST = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
global.extra-index-url='file:///opt/pypi/simple https://mirror.example/simple'
global.find-links='/nonexistent-wheels'
global.index-url='https://proxy.example/pypi/simple'
global.trusted-host='proxy.example'
"""


def test_host_pip_settings_keep_network_indexes_and_note_host_paths(tmp_path):
    cert = tmp_path / "ca.pem"
    cert.write_text("x")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    s = pipconf.host_pip_settings(PIP_LIST, environ={"PIP_CERT": str(cert), "PIP_FIND_LINKS": str(wheels)})
    assert s.index_url == "https://proxy.example/pypi/simple"
    assert s.extra_index_urls == ["https://mirror.example/simple"]
    assert s.trusted_hosts == ["proxy.example"]
    assert s.cert == str(cert) and s.wheelhouses == [str(wheels)]
    assert any("file:///opt/pypi/simple" in i for i in s.ignored)
    assert s.build_args() == {"PIP_INDEX_URL": "https://proxy.example/pypi/simple",
                              "PIP_EXTRA_INDEX_URL": "https://mirror.example/simple",
                              "PIP_TRUSTED_HOST": "proxy.example"}
