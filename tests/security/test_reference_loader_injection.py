"""Attack: run agent code inside the reference's process and dump its mapped segments.

Before the fix, ``LD_PRELOAD=/tmp/d.so ./reference_executable`` loaded the agent's library
into a dynamically linked reference, which then read ``/proc/self/maps`` and wrote the
program's bytes out. The fixture's reference is now dynamically linked (like most real
ones); the library is compiled on the host and shipped in the command text (base64).

It records every process it is loaded into (``/workspace/injected/<pid>`` holding that
process's ``/proc/self/exe``) and dumps the main executable's mapped segments next to it.
A control run into ``/bin/true`` proves the library works; the reference never loads it.
"""

from __future__ import annotations

import base64
import tarfile
from pathlib import Path

import pytest

from tests.security.reference_support import (
    assert_no_reference_bytes,
    attack_log,
    fixture_reference,
    gcc_shared,
    run_attack,
)

pytestmark = pytest.mark.docker

DUMPER_C = r"""
#include <stdio.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void dump(void) {
    char exe[512] = {0}, path[600], line[1024];
    if (readlink("/proc/self/exe", exe, sizeof exe - 1) < 0) strcpy(exe, "?");
    snprintf(path, sizeof path, "/workspace/injected/%d", (int)getpid());
    FILE *mark = fopen(path, "w");
    if (mark) { fprintf(mark, "%s\n", exe); fclose(mark); }
    snprintf(path, sizeof path, "/workspace/injected/%d.dump", (int)getpid());
    FILE *out = fopen(path, "w"), *maps = fopen("/proc/self/maps", "r");
    if (!out || !maps) return;
    while (fgets(line, sizeof line, maps)) {
        unsigned long lo, hi;
        char perms[8], file[600] = {0};
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %599s", &lo, &hi, perms, file) < 3) continue;
        if (perms[0] != 'r' || strcmp(file, exe) != 0) continue;
        fwrite((const void *)lo, 1, hi - lo, out);
    }
    fclose(maps);
    fclose(out);
}
"""

ATTACK = """
cd /workspace
mkdir -p injected
echo {b64} | base64 -d > /tmp/d.so
{{
echo "preload=$(LD_PRELOAD=/tmp/d.so ./reference_executable 2 + 3)"
echo "audit=$(LD_AUDIT=/tmp/d.so ./reference_executable 4 '*' 3)"
echo "libpath=$(LD_LIBRARY_PATH=/tmp LD_PRELOAD=d.so ./reference_executable 1 + 1)"
echo "control=$(LD_PRELOAD=/tmp/d.so /bin/true; echo $?)"
}} > attack.log
ls injected > injected.list
"""


def test_preloaded_code_never_runs_in_the_reference(tmp_path: Path) -> None:
    ref = fixture_reference()
    library = gcc_shared(tmp_path, DUMPER_C)
    command = ATTACK.format(b64=base64.b64encode(library).decode())
    run, row = run_attack(tmp_path / "run", command)
    log = dict(line.split("=", 1) for line in attack_log(run, row).splitlines())
    # The reference ran, unchanged, and no library was loaded into it.
    assert (log["preload"], log["audit"], log["libpath"]) == ("5", "12", "2"), log
    assert log["control"] == "0", log
    with tarfile.open(run.root / row["output_paths"]["submission"], "r:gz") as tar:
        injected = {m.name[len("injected/"):]: m for m in tar.getmembers()
                    if m.name.startswith("injected/") and m.isreg()}
        marks = sorted(n for n in injected if not n.endswith(".dump"))
        # Exactly one process loaded the library: the control (/bin/true), never the reference.
        texts = [tar.extractfile(injected[n]).read().decode().strip()  # type: ignore[union-attr]
                 for n in marks]
        assert texts == ["/usr/bin/true"], marks
        assert injected[f"{marks[0]}.dump"].size > 0  # the dumper works
    assert assert_no_reference_bytes(run, row, ref) > 3
