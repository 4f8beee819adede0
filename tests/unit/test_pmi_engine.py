"""ciod's PMI engine (ionode/ciod/pmi_engine.c) on its own, with no socket:
a harness (tests/unit/pmi_engine_harness.c) feeds it processes' bytes and
FENCE_OUTs and prints what its callbacks got.  Puts and gets, a fence across
two ranks of a pset and across two psets (this test plays the service node),
malformed commands, a get of a missing key, abort and leaving without
finalize; and that the engine calls nothing but memory, string and number
functions.  The same commands over real connections: tests/unit/test_pmi.py."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ["ionode/ciod/pmi_engine.c", "ionode/ciod/kvs.c"]
CFLAGS = ["gcc", "-std=c11", "-D_GNU_SOURCE", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
          "-Iprotocol", "-Iionode/ciod"]
INIT1 = "cmd=init pmi_version=1 pmi_subversion=1\\n"
INIT2 = "cmd=init pmi_version=2 pmi_subversion=0\\n"


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("pmi-engine") / "pmi_engine_harness"
    subprocess.run([*CFLAGS, "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-o", str(exe),
                    "tests/unit/pmi_engine_harness.c", *ENGINE], cwd=ROOT, check=True)
    return exe


class Engine:
    """One engine (one pset's view of a job), driven a command at a time."""

    def __init__(self, harness: Path, job: str) -> None:
        self.p = subprocess.Popen([str(harness)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.cmd(f"job {job}") == []

    def cmd(self, line: str) -> list[str]:
        assert self.p.stdin and self.p.stdout
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        out = []
        while (got := self.p.stdout.readline().rstrip("\n")) != ".":
            assert got, f"the harness ended during {line!r}"
            out.append(got)
        return out

    def close(self) -> None:
        assert self.p.stdin
        self.p.stdin.close()
        assert self.p.wait(timeout=10) == 0          # the sanitizers found nothing


@pytest.fixture
def engines(harness: Path) -> Iterator[list[Engine]]:
    made: list[Engine] = []
    yield made
    for e in made:
        e.close()


def v2(cmd: str) -> str:
    """A PMI-2 command with its length prefix, as the harness's `in` text."""
    return f"{len(cmd):6d}{cmd}"


def answers(out: list[str]) -> list[str]:
    return [line.split(" ", 4)[4] for line in out if line.startswith("answer ")]


def test_put_then_get_in_the_pset_and_a_missing_key(harness: Path, engines: list[Engine]) -> None:
    e = Engine(harness, "7 2 - 0:0:0 1:1:0")
    engines.append(e)
    assert e.cmd(f"in 0 {INIT1}") == ["answer 0 0 0 cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\\n"]
    assert answers(e.cmd("in 0 cmd=get_my_kvsname\\n")) == ["cmd=my_kvsname rc=0 kvsname=lattice-7\\n"]
    assert answers(e.cmd("in 0 cmd=put kvsname=lattice-7 key=card-0 value=addr=x/y\\n")) == ["cmd=put_result rc=0\\n"]
    # a put is visible in its pset at once, to the other ranks there too
    assert e.cmd(f"in 1 {INIT1}")
    assert e.cmd("in 1 cmd=get kvsname=lattice-7 key=card-0\\n") == [
        "answer 1 1 1 cmd=get_result rc=0 msg=success value=addr=x/y\\n"]
    assert answers(e.cmd("in 1 cmd=get kvsname=lattice-7 key=card-9\\n")) == [
        "cmd=get_result rc=1 msg=key_not_found\\n"]
    # PMI-2: the same space; ";;" is a literal ';'; thrid comes back
    assert e.cmd(f"in 1 {INIT2}")
    assert answers(e.cmd("in 1 " + v2("cmd=kvs-put;key=semi;value=a;;b;thrid=t1;"))) == [
        v2("cmd=kvs-put-response;rc=0;thrid=t1;")]
    assert answers(e.cmd("in 1 " + v2("cmd=kvs-get;key=semi;"))) == [
        v2("cmd=kvs-get-response;rc=0;found=TRUE;value=a;b;")]
    assert answers(e.cmd("in 1 " + v2("cmd=kvs-get;key=card-9;"))) == [
        v2("cmd=kvs-get-response;rc=0;found=FALSE;")]
    assert answers(e.cmd("in 0 cmd=get kvsname=lattice-7 key=semi\\n")) == [
        "cmd=get_result rc=0 msg=success value=a;b\\n"]


def test_commands_in_any_pieces(harness: Path, engines: list[Engine]) -> None:
    """Framing is the engine's: bytes one at a time give the same answers, each once complete."""
    e = Engine(harness, "7 1 - 0:0:0")
    engines.append(e)
    assert answers(e.cmd(f"bytes 0 {INIT1}cmd=get_universe_size\\n")) == [
        "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\\n", "cmd=universe_size rc=0 size=1\\n"]
    assert e.cmd("bytes 0 cmd=get_app") == []
    assert answers(e.cmd("bytes 0 num\\n")) == ["cmd=appnum rc=0 appnum=0\\n"]


def fence_keys(line: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in line.split()[4:])


def test_fence_across_ranks_and_psets(harness: Path, engines: list[Engine]) -> None:
    # job 9: ranks 0, 1 in pset A (nodes 0, 1), ranks 2, 3 in pset B
    a = Engine(harness, "9 4 (vector,(0,4,1)) 0:0:0 1:1:0")
    b = Engine(harness, "9 4 (vector,(0,4,1)) 2:0:0 3:1:0")
    engines += [a, b]
    for e, ranks in ((a, (0, 1)), (b, (2, 3))):
        for s, r in enumerate(ranks):
            assert e.cmd(f"in {s} {INIT1}")
            assert answers(e.cmd(f"in {s} cmd=put kvsname=lattice-9 key=card-{r} value=at-{r}\\n")) == [
                "cmd=put_result rc=0\\n"]
    # the first rank of a pset waits: nothing goes up, nobody is answered
    assert a.cmd("in 0 cmd=barrier_in\\n") == []
    assert a.cmd("in 0 cmd=barrier_in\\n") == [
        "bad 0 barrier_in twice", "answer 0 0 0 cmd=barrier_out rc=-1 msg=barrier_in_twice\\n"]
    # the last one sends ONE fence with the pset's puts
    up_a = a.cmd("in 1 cmd=barrier_in\\n")
    assert len(up_a) == 1 and up_a[0].startswith("fence 9 0 0 "), up_a
    assert fence_keys(up_a[0]) == {"card-0": "at-0", "card-1": "at-1"}
    assert b.cmd("in 1 cmd=barrier_in\\n") == []
    up_b = b.cmd("in 0 cmd=barrier_in\\n")
    assert fence_keys(up_b[0]) == {"card-2": "at-2", "card-3": "at-3"}
    # pset A cannot see pset B's keys before the fence ends
    assert answers(a.cmd("in 0 cmd=get kvsname=lattice-9 key=card-3\\n"))[-1] == "cmd=get_result rc=1 msg=key_not_found\\n"
    # the service node's merge comes down: every rank of the pset is released
    merged = " ".join(f"{k}={v}" for k, v in sorted({**fence_keys(up_a[0]), **fence_keys(up_b[0])}.items()))
    for e, ranks in ((a, (0, 1)), (b, (2, 3))):
        out = e.cmd(f"fenceout 9 0 0 {merged}")
        assert out[-1] == "matched"
        assert sorted(out[:-1]) == [f"answer {s} {r} {s} cmd=barrier_out rc=0\\n" for s, r in enumerate(ranks)]
    assert answers(a.cmd("in 0 cmd=get kvsname=lattice-9 key=card-3\\n")) == [
        "cmd=get_result rc=0 msg=success value=at-3\\n"]
    assert answers(b.cmd("in 1 cmd=get kvsname=lattice-9 key=PMI_process_mapping\\n")) == [
        "cmd=get_result rc=0 msg=success value=(vector,(0,4,1))\\n"]
    # a FENCE_OUT that matches no waiting fence changes nothing
    assert a.cmd("fenceout 9 0 0 card-3=forged") == ["unmatched"]
    assert answers(a.cmd("in 0 cmd=get kvsname=lattice-9 key=card-3\\n")) == [
        "cmd=get_result rc=0 msg=success value=at-3\\n"]
    # the next fence: epoch 1, only the puts since the last; a PMI-2 rank too
    assert a.cmd(f"in 1 {INIT2}")
    assert a.cmd("in 1 " + v2("cmd=kvs-put;key=second;value=2;"))
    assert a.cmd("in 1 " + v2("cmd=kvs-fence;thrid=t9;")) == []
    up = a.cmd("in 0 cmd=barrier_in\\n")
    assert len(up) == 1 and up[0].startswith("fence 9 1 0 ") and fence_keys(up[0]) == {"second": "2"}, up
    out = a.cmd("fenceout 9 1 0 second=2")
    assert sorted(answers(out)) == sorted(["cmd=barrier_out rc=0\\n", v2("cmd=kvs-fence-response;rc=0;thrid=t9;")])


def test_a_large_fence_goes_up_and_comes_down_in_chunks(harness: Path, engines: list[Engine]) -> None:
    e = Engine(harness, "5 1 - 0:0:0")
    engines.append(e)
    assert e.cmd(f"in 0 {INIT1}")
    value = "v" * 1000
    for i in range(0, 1100, 10):                 # 1.1 MB of puts: more than one message carries
        puts = "".join(f"cmd=put kvsname=lattice-5 key=k{j} value={value}\\n" for j in range(i, i + 10))
        assert len(answers(e.cmd(f"in 0 {puts}"))) == 10
    up = e.cmd("in 0 cmd=barrier_in\\n")
    assert [line.split()[:4] for line in up] == [["fence", "5", "0", "1"], ["fence", "5", "0", "0"]]
    keys = {**fence_keys(up[0]), **fence_keys(up[1])}
    assert len(keys) == 1100 and keys["k1099"] == value
    # FENCE_OUT in chunks too: the keys of each are stored, the last releases
    assert e.cmd("fenceout 5 0 1 far=1") == ["matched"]
    assert answers(e.cmd("in 0 cmd=get kvsname=lattice-5 key=far\\n")) == ["cmd=get_result rc=0 msg=success value=1\\n"]
    assert e.cmd("fenceout 5 0 0 farther=2") == ["answer 0 0 0 cmd=barrier_out rc=0\\n", "matched"]


def test_tree_fence_waits_for_the_tree_and_every_child(harness: Path, engines: list[Engine]) -> None:
    """A tree job's fence goes up once the tree is known and the way up is
    open, with the pset's puts and every child's (in chunks too); what does
    not belong to the fence under way is refused and changes nothing."""
    e = Engine(harness, "1 1 - 0:0:0")
    engines.append(e)
    assert e.cmd("treejob 5 6 - 0:0:0 1:1:0") == []
    for slot in (0, 1):
        assert e.cmd(f"in {slot} {INIT1}")
    assert answers(e.cmd("in 0 cmd=put kvsname=lattice-5 key=card-0 value=a0\\n")) == ["cmd=put_result rc=0\\n"]
    assert e.cmd("in 0 cmd=barrier_in\\n") == []
    assert e.cmd("in 1 cmd=barrier_in\\n") == []          # the pset is in, but the tree is not known
    assert e.cmd("child 0 5 0 0 x=1") == ["refused fence from I/O node 0, which is not below this one"]
    assert e.cmd("tree 2") == ["tree ok"]
    assert e.cmd("tree 2") == ["tree refused"]           # once per job
    assert e.cmd("child 0 5 0 1 card-2=a2") == ["ok"]     # a first chunk (FENCE_MORE)
    assert e.cmd("child 0 5 0 0 card-3=a3") == ["ok"]     # its last
    assert e.cmd("child 0 5 0 0 card-3=again") == [
        "refused fence 0 of job 5 not expected here (job 5 is at fence 0, which it joined)"]
    assert e.cmd("child 1 5 1 0 card-4=a4") == [           # a fence that is not under way
        "refused fence 1 of job 5 not expected here (job 5 is at fence 0)"]
    assert e.cmd("child 1 6 0 0 card-4=a4") == [
        "refused fence 0 of job 6 not expected here (job 5 is at fence 0)"]
    assert e.cmd("child 2 5 0 0 card-4=a4") == ["refused fence from I/O node 2, which is not below this one"]
    assert e.cmd("child 1 5 0 0 card-4=a4 card-5=a5") == ["ok"]   # every child is in: still no way up
    up = e.cmd("treeup")
    assert len(up) == 1 and up[0].startswith("fence 5 0 0 "), up
    assert fence_keys(up[0]) == {"card-0": "a0", "card-2": "a2", "card-3": "a3", "card-4": "a4", "card-5": "a5"}
    out = e.cmd("fenceout 5 0 0 card-0=a0 card-2=a2 card-3=a3 card-4=a4 card-5=a5")
    assert out[-1] == "matched" and len(answers(out)) == 2
    # the next fence: the children count again, from nothing
    assert e.cmd("child 1 5 1 0 late=1") == ["ok"]
    assert e.cmd("in 0 cmd=barrier_in\\n") == []
    assert e.cmd("in 1 cmd=barrier_in\\n") == []
    up = e.cmd("child 0 5 1 0")
    assert len(up) == 2 and up[0].startswith("fence 5 1 0 ") and fence_keys(up[0]) == {"late": "1"}, up


def test_a_child_lost_before_it_joins_breaks_the_fence(harness: Path, engines: list[Engine]) -> None:
    """A child whose connection ended can never join: the fence under way,
    or the next one to start, is broken (said once), instead of a hang."""
    e = Engine(harness, "1 1 - 0:0:0")
    engines.append(e)
    assert e.cmd("treejob 5 4 - 0:0:0") == []
    assert e.cmd(f"in 0 {INIT1}")
    assert e.cmd("tree 3") == ["tree ok"]
    assert e.cmd("treeup") == []
    assert e.cmd("childgone 2") == []                   # no fence under way: nothing yet
    assert e.cmd("child 0 5 0 0 a=1") == ["broken fence 0 of job 5 cannot complete: the connection of I/O node 2 "
                                          "below this one ended before it joined", "ok"]
    assert e.cmd("childgone 1") == []                   # said once
    assert e.cmd("in 0 cmd=barrier_in\\n") == []          # and nothing goes up
    # a child that joined and then went is no loss to the fence under way
    f = Engine(harness, "1 1 - 0:0:0")
    engines.append(f)
    assert f.cmd("treejob 6 4 - 0:0:0") == []
    assert f.cmd(f"in 0 {INIT1}") and f.cmd("tree 1") == ["tree ok"] and f.cmd("treeup") == []
    assert f.cmd("child 0 6 0 0 b=2") == ["ok"]
    assert f.cmd("childgone 0") == []
    assert f.cmd("in 0 cmd=barrier_in\\n")[0].startswith("fence 6 0 0 ")


def test_a_mapping_longer_than_mpich_reads_is_not_served(harness: Path, engines: list[Engine]) -> None:
    """PMI_process_mapping comes whole with the job; one longer than MPICH
    4.0.2 reads (640 characters served; it aborts MPI_Init at 681, though
    get_maxes says 1024) is not served cut short: PMI-1 gets rc=1, so
    MPICH finds the ranks that share a node by itself; PMI-2, which must
    have it, a clear error.  One that fits is served whole."""
    irregular = "(vector," + ",".join(f"({n},1,1)" for n in range(0, 2 * 1024, 2)) + ")"    # 1,024 ranks
    e = Engine(harness, "1 1 - 0:0:0")
    engines.append(e)
    assert e.cmd(f"job 8 1024 {irregular} 0:0:0 1:0:0") == [
        f"note job 8: PMI_process_mapping has {len(irregular)} characters, more than the 640 served: "
        "MPI finds the ranks that share a node by itself"]
    assert e.cmd(f"in 0 {INIT1}") and e.cmd(f"in 1 {INIT2}")
    assert answers(e.cmd("in 0 cmd=get kvsname=lattice-8 key=PMI_process_mapping\\n")) == [
        f"cmd=get_result rc=1 msg=PMI_process_mapping_has_{len(irregular)}_characters,_more_than_the_640_served\\n"]
    assert answers(e.cmd("in 1 " + v2("cmd=info-getjobattr;key=PMI_process_mapping;"))) == [v2(
        f"cmd=info-getjobattr-response;rc=-1;errmsg=PMI_process_mapping has {len(irregular)} characters, "
        "more than the 640 served;")]
    # 640 characters are served whole, and 1,024 ranks placed regularly stay short
    edge = "(vector,(0," + "1" * (640 - len("(vector,(0,,1))")) + ",1))"     # the engine does not parse it
    assert len(edge) == 640
    for mapping in (edge, "(vector,(0,256,4))"):
        assert e.cmd(f"job 9 1024 {mapping} 0:0:0") == []
        assert e.cmd(f"in 0 {INIT1}")
        assert answers(e.cmd("in 0 cmd=get kvsname=lattice-9 key=PMI_process_mapping\\n")) == [
            f"cmd=get_result rc=0 msg=success value={mapping}\\n"]


def test_malformed_commands_get_an_error_answer(harness: Path, engines: list[Engine]) -> None:
    e = Engine(harness, "7 2 - 0:0:0 1:0:0")
    engines.append(e)
    assert e.cmd("in 0 cmd=get_maxes\\n") == [
        "bad 0 command before init", "answer 0 0 0 cmd=error rc=-1 msg=command_before_init\\n"]
    assert e.cmd(f"in 0 {INIT1}")
    assert e.cmd("in 0 hello there\\n") == [
        "bad 0 malformed PMI line: does not start with cmd=",
        "answer 0 0 0 cmd=error rc=-1 msg=malformed_PMI_line:_does_not_start_with_cmd_\\n"]
    assert e.cmd("in 0 cmd=put kvsname=lattice-7 k@y=1\\n")[0] == \
        "bad 0 malformed PMI line: bad character after a key"
    assert e.cmd("in 0 cmd=no_such_thing\\n")[0] == "bad 0 unknown PMI-1 command"
    assert e.cmd("in 0 cmd=put kvsname=other key=a value=1\\n") == [
        "bad 0 put to an unknown kvsname", "answer 0 0 0 cmd=put_result rc=-1 msg=put_to_an_unknown_kvsname\\n"]
    assert e.cmd("in 0 cmd=get kvsname=lattice-7 key=" + "k" * 65 + "\\n")[0] == \
        "bad 0 get needs a key of 1..64 characters"
    assert e.cmd("in 0 cmd=get\\0 kvsname=lattice-7\\n")[0] == "bad 0 NUL byte in a PMI line"
    # a line over the limit is dropped up to its newline, with one error
    assert e.cmd("in 0 cmd=put " + "x" * 4200) == [
        "bad 0 PMI line longer than 4096 bytes", "answer 0 0 0 cmd=error rc=-1 msg=PMI_line_longer_than_4096_bytes\\n"]
    assert e.cmd("in 0 " + "y" * 100 + "\\n") == []
    # the process goes on after each
    assert answers(e.cmd("in 0 cmd=get_appnum\\n")) == ["cmd=appnum rc=0 appnum=0\\n"]
    # PMI-2: an error response of the command's name; a bad length prefix ends its PMI
    assert e.cmd(f"in 1 {INIT2}")
    assert e.cmd("in 1 " + v2("cmd=kvs-get;")) == [
        "bad 1 kvs-get needs a key of 1..64 characters",
        "answer 1 1 0 " + v2("cmd=kvs-get-response;rc=-1;errmsg=kvs-get needs a key of 1..64 characters;")]
    assert e.cmd("in 1 " + v2("cmd=kvs-get;=x;"))[0] == "bad 1 malformed PMI-2 command: expected a key"
    assert e.cmd("in 1 00x012cmd=job-getid;")[0] == \
        "bad 1 bad PMI-2 length prefix; ignoring this rank's PMI from now on"
    assert e.cmd("in 1 " + v2("cmd=job-getid;")) == []


def test_abort_and_leaving_without_finalize(harness: Path, engines: list[Engine]) -> None:
    e = Engine(harness, "7 4 - 0:0:0 1:1:0 2:2:0 3:3:0")
    engines.append(e)
    for s in range(3):
        assert e.cmd(f"in {s} {INIT1}")
    # abort: no answer, and the rest of that input is not served
    assert e.cmd("in 0 cmd=abort exitcode=3 message=out_of_cheese\\ncmd=get_appnum\\n") == [
        "abort 0 3 out_of_cheese"]
    assert e.cmd("exit 0 3") == []                   # it aborted already
    assert answers(e.cmd("in 1 cmd=finalize\\n")) == ["cmd=finalize_ack rc=0\\n"]
    assert e.cmd("exit 1 0") == []                   # finalized: may exit
    assert e.cmd("exit 3 0") == []                   # never used PMI
    assert e.cmd("exit 2 0") == [                    # left MPI: the others would hang
        "abort 2 1 exited without PMI finalize (MPI_Finalize not called); the other ranks cannot complete"]
    assert e.cmd("slot 2") == ["slot 2 node 2"] and e.cmd("slot 7") == ["slot -1"]


def test_fence_out_is_checked_before_use(harness: Path, engines: list[Engine]) -> None:
    e = Engine(harness, "7 1 - 0:0:0")
    engines.append(e)
    assert e.cmd("fenceout 7 0 4 a=b") == ["refused fence with unknown flags 0x4"]
    assert e.cmd("fenceout 7 0 0 " + "k" * 65 + "=v") == ["refused fence: key 0 too long"]
    assert e.cmd("fenceout 7 0 0 a=b") == ["unmatched"]          # no fence waiting


# What the engine may call: memory, strings, numbers, formatting.  No
# descriptor, socket, poll, lock or log: those are the caller's (pmi.c).
ALLOWED = {"__errno_location", "calloc", "malloc", "realloc", "free", "memchr", "memcpy", "memmove", "memset",
           "snprintf", "vsnprintf", "strchr", "strcmp", "strncmp", "strlen", "strdup", "strtol", "strtoul",
           "kvs_new", "kvs_free", "kvs_get", "kvs_put", "kvs_count", "kvs_bytes", "kvs_cost"}


def test_engine_calls_no_io(tmp_path: Path) -> None:
    undefined: set[str] = set()
    for src in ENGINE:
        obj = tmp_path / (Path(src).stem + ".o")
        subprocess.run([*CFLAGS, "-c", "-o", str(obj), src], cwd=ROOT, check=True)
        nm = subprocess.run(["nm", "-u", str(obj)], capture_output=True, text=True, check=True)
        undefined |= {line.split()[-1] for line in nm.stdout.splitlines() if line.strip()}
    assert undefined and undefined <= ALLOWED, sorted(undefined - ALLOWED)
    text = (ROOT / "ionode/ciod/pmi_engine.c").read_text()
    assert '#include "ciod.h"' not in text and "struct conn" not in text


def test_name_requests_go_up_and_their_answers_come_back(harness: Path, engines: list[Engine]) -> None:
    """MPI_Publish_name / Lookup / Unpublish: the engine sends each request to the service node
    (which keeps the job's names) and answers the rank when the service node's answer comes."""
    e = Engine(harness, "7 2 - 0:0:0 1:1:0")
    engines.append(e)
    assert e.cmd(f"in 0 {INIT1}") and e.cmd(f"in 1 {INIT2}")
    # PMI-1: no answer yet, the request goes up
    assert e.cmd("in 0 cmd=publish_name service=ocean port=tag#0$host#x$\\n") == ["name 0 1 ocean tag#0$host#x$"]
    assert e.cmd("nameout 0 3 0 x") == ["unmatched"]          # not the request that waits
    assert e.cmd("nameout 1 1 0") == ["unmatched"]            # rank 1 asked nothing
    assert e.cmd("nameout 0 1 0") == ["answer 0 0 0 cmd=publish_result rc=0 info=ok\\n", "matched"]
    assert e.cmd("nameout 0 1 0") == ["unmatched"]            # answered once
    assert e.cmd("in 0 cmd=lookup_name service=ocean\\n") == ["name 0 3 ocean -"]
    assert e.cmd("nameout 0 3 0 tag#0$host#x$") == [
        "answer 0 0 0 cmd=lookup_result rc=0 info=ok port=tag#0$host#x$\\n", "matched"]
    assert e.cmd("in 0 cmd=unpublish_name service=ocean\\n") == ["name 0 2 ocean -"]
    assert e.cmd("nameout 0 2 1") == [
        "answer 0 0 0 cmd=unpublish_result rc=1 info=service_not_found\\n", "matched"]
    # PMI-2, with thrid
    assert e.cmd("in 1 " + v2("cmd=name-lookup;name=ocean;infokeycount=0;thrid=9;")) == ["name 1 3 ocean -"]
    assert e.cmd("nameout 1 3 0 P1") == [
        "answer 1 1 1 " + v2("cmd=name-lookup-response;rc=0;found=TRUE;port=P1;value=P1;thrid=9;"), "matched"]
    assert e.cmd("in 1 " + v2("cmd=name-publish;name=ocean;port=P2;")) == ["name 1 1 ocean P2"]
    assert e.cmd("nameout 1 1 1") == [
        "answer 1 1 1 " + v2("cmd=name-publish-response;rc=1;errmsg=service already published;"), "matched"]
    # malformed requests are answered at once and never go up
    assert e.cmd("in 0 cmd=publish_name service=ocean\\n") == [
        "bad 0 publishing needs a port of 1..1024 characters",
        "answer 0 0 0 cmd=publish_result rc=-1 msg=publishing_needs_a_port_of_1..1024_characters\\n"]
    assert e.cmd("in 1 " + v2("cmd=name-lookup;"))[0] == "bad 1 a name request needs a service name of 1..1024 characters"


def test_a_process_past_its_put_bound_gets_an_error_and_the_job_keeps_its_keys(harness: Path,
                                                                              engines: list[Engine]) -> None:
    """Issue 24: the key space was unbounded (150,000 puts of 1 KiB took ciod
    to 315 MB).  Puts of one process since its last fence, and the job's keys
    on the I/O node, are bounded: past a bound the put gets rc=-1 with the
    reason (and the RAS event, `bad`), nothing is stored, and a fence resets
    the process's own count."""
    e = Engine(harness, "3 2 - 0:0:0 1:1:0")
    engines.append(e)
    assert e.cmd("limits 0 0 3 0") == []
    assert e.cmd("job 3 2 - 0:0:0 1:1:0") == []
    assert e.cmd(f"in 0 {INIT1}") and e.cmd(f"in 1 {INIT2}")
    for i in range(3):
        assert answers(e.cmd(f"in 0 cmd=put kvsname=lattice-3 key=k{i} value=v\\n")) == ["cmd=put_result rc=0\\n"]
    out = e.cmd("in 0 cmd=put kvsname=lattice-3 key=k3 value=v\\n")
    assert out[0] == "bad 0 PMI key space bound: rank 0 put 3 keys since its last fence, the most a process may"
    assert answers(out) == ["cmd=put_result rc=-1 msg=PMI_key_space_bound:_rank_0_put_3_keys_since_its_last_fence,"
                            "_the_most_a_process_may\\n"]
    assert answers(e.cmd("in 0 cmd=get kvsname=lattice-3 key=k3\\n")) == ["cmd=get_result rc=1 msg=key_not_found\\n"]
    # PMI-2 says it in errmsg; another process has a bound of its own
    for i in range(3):
        assert answers(e.cmd("in 1 " + v2(f"cmd=kvs-put;key=p{i};value=w;"))) == [v2("cmd=kvs-put-response;rc=0;")]
    assert answers(e.cmd("in 1 " + v2("cmd=kvs-put;key=p3;value=w;"))) == [v2(
        "cmd=kvs-put-response;rc=-1;errmsg=PMI key space bound: rank 1 put 3 keys since its last fence, the most "
        "a process may;")]
    # a fence starts a new count
    assert e.cmd("in 0 cmd=barrier_in\\n") == []
    up = e.cmd("in 1 " + v2("cmd=kvs-fence;"))
    assert len(up) == 1 and set(fence_keys(up[0])) == {"k0", "k1", "k2", "p0", "p1", "p2"}, up
    assert len(answers(e.cmd("fenceout 3 0 0 k0=v"))) == 2
    assert answers(e.cmd("in 0 cmd=put kvsname=lattice-3 key=k3 value=v\\n")) == ["cmd=put_result rc=0\\n"]


def test_the_job_bound_holds_for_puts_node_attributes_and_fences(harness: Path, engines: list[Engine]) -> None:
    e = Engine(harness, "4 1 - 0:0:0")
    engines.append(e)
    # at most 4 keys, 600 bytes of them (PMI_process_mapping is none here)
    assert e.cmd("limits 4 600 0 0") == [] and e.cmd("job 4 2 - 0:0:0") == []
    assert e.cmd(f"in 0 {INIT2}")
    value = "x" * 100
    held = 0
    for i in range(10):
        out = answers(e.cmd("in 0 " + v2(f"cmd=kvs-put;key=k{i};value={value};")))
        if out != [v2("cmd=kvs-put-response;rc=0;")]:
            break
        held += 1
    assert 1 <= held < 4, held                                   # the bytes bound came first
    assert out == [v2("cmd=kvs-put-response;rc=-1;errmsg=PMI key space bound: the job's PMI keys on this I/O "
                      "node would pass their bound of 600 bytes;")], out
    # replacing a value by a shorter one costs nothing
    assert answers(e.cmd("in 0 " + v2("cmd=kvs-put;key=k0;value=y;"))) == [v2("cmd=kvs-put-response;rc=0;")]
    assert "rc=-1" in answers(e.cmd("in 0 " + v2(f"cmd=info-putnodeattr;key=a;value={value * 5};")))[0]
    # a FENCE_OUT bringing more than the job may hold here: the fence fails, with the reason
    up = e.cmd("in 0 " + v2("cmd=kvs-fence;"))
    assert len(up) == 1 and up[0].startswith("fence 4 0 0"), up
    many = " ".join(f"far{i}={value}" for i in range(20))
    out = e.cmd(f"fenceout 4 0 0 {many}")
    assert out[-1] == "matched" and any(line.startswith("note pmi: job 4 fence 0: ") for line in out), out
    assert [line.split(" ", 2)[:2] for line in out if line.startswith("bad ")] == [["bad", "0"]], out
    assert answers(out) == [v2("cmd=kvs-fence-response;rc=-1;errmsg=PMI key space bound: the job's keys from every "
                               "pset would pass 4 keys or 600 bytes on this I/O node;")], out
