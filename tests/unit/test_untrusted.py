import os, pytest
from pathlib import Path
from harness.untrusted import read_untrusted_bytes, UntrustedFileError, is_regular_file

def test_reads(tmp_path: Path):
    p = tmp_path / "a"; p.write_bytes(b"x" * 10)
    assert read_untrusted_bytes(p) == b"x" * 10
    with pytest.raises(UntrustedFileError): read_untrusted_bytes(p, 9)
    l = tmp_path / "l"; l.symlink_to("/etc/passwd")
    with pytest.raises(UntrustedFileError): read_untrusted_bytes(l)
    f = tmp_path / "f"; os.mkfifo(f)
    with pytest.raises(UntrustedFileError): read_untrusted_bytes(f)
    z = tmp_path / "z"; z.symlink_to("/dev/zero")
    with pytest.raises(UntrustedFileError): read_untrusted_bytes(z)
    assert is_regular_file(p) and not is_regular_file(l) and not is_regular_file(f)
