"""`python -m fitting.opcheck any SPEC --ref REF` with --shape or --inputs: ops with no slot
(a layer norm with weight and bias, a loss of (input, target), a softmax with a dim keyword)
get every check that needs no model; the training comparison is a skip with the reason."""

import pytest

from fitting.opcheck.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")
ANY = "tests.opcheck.any_ops:"
NO_MODEL = "no slot, so no model to train with this op (name a slot to compare training)"


def rows(text: str) -> dict[str, tuple[str, str]]:
    checks = text.split("Verdict:")[0]
    found = [line.split(" | ") for line in checks.splitlines() if line.startswith("| ")][1:]
    return {r[0].removeprefix("| "): (r[1], r[2].removesuffix(" |")) for r in found if len(r) > 2}


@pytest.mark.parametrize(("spec", "ref", "inputs"), [
    (ANY + "layer_norm", "torch.nn.functional:layer_norm", ANY + "layer_norm_samples"),
    (ANY + "mse", "torch.nn.functional:mse_loss", ANY + "mse_samples"),
    (ANY + "softmax", "torch:softmax", ANY + "softmax_samples"),
    ("swish:Swish", "torch.nn.functional:silu", None),
])  # fmt: skip
def test_ops_with_no_slot_get_a_card(spec, ref, inputs, tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend("docs/examples")
    given = ["--inputs", inputs] if inputs else ["--shape", "64,8"]
    code = main(["any", spec, "--ref", ref, *given, "--quick", "--out", str(tmp_path)])
    text = (tmp_path / "opcheck.md").read_text()
    assert code == 0, text
    found = rows(text)
    assert found["training"] == ("skip", NO_MODEL) and found["cost in a model"][0] == "skip"
    for name in ("forward parity float32", "backward parity float64", "gradcheck",
                 "gradgradcheck", "forward AD (jvp)", "vmap"):  # fmt: skip
        assert found[name][0] == "pass", (name, found[name])
    assert text.startswith(f"# opcheck: `any {spec}`")


def test_every_sample_is_checked(tmp_path, capsys):
    argv = ["any", ANY + "softmax_last_dim", "--ref", "torch:softmax", "--inputs",
            ANY + "softmax_samples", "--quick", "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 1
    found = rows((tmp_path / "opcheck.md").read_text())
    assert found["forward parity float32"][0] == "pass"  # sample 0: dim=1, the last
    status, detail = found["sample 1 {'dim': 0} (float32)"]
    assert status == "wrong" and detail.startswith("forward: max abs err ")


def test_any_needs_a_reference_and_inputs(tmp_path, capsys):
    assert main(["any", ANY + "softmax", "--ref", "torch:softmax", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"error: any {ANY}softmax: an op with no slot needs --ref <module>:<name> and its inputs, "
        "--shape 64,8 or --inputs <module>:<fn>\n"
    )
