"""ScalarTensor: handled torch functions stay sparse and agree with the dense tensor."""

from fractions import Fraction

import pytest
import torch

from models.ops.exhibits import ScalarTensor


@pytest.fixture
def no_densify(monkeypatch):
    """Make .tensor() fail, proving a handled function never builds the dense N×N matrix."""

    def refuse(self, *args, **kwargs):
        raise AssertionError("densified")

    monkeypatch.setattr(ScalarTensor, "tensor", refuse)


def test_dense_form():
    s = ScalarTensor(3, 2.0)
    assert torch.equal(s.tensor(), 2.0 * torch.eye(3))
    assert repr(s) == "ScalarTensor(N=3, value=2.0)"
    assert s.shape == (3, 3)


def test_handled_functions_match_dense_without_densifying(no_densify):
    s, t = ScalarTensor(4, 2.5), ScalarTensor(4, -1.0)
    dense_s = 2.5 * torch.eye(4)
    m = torch.randn(4, 3)
    sq = torch.randn(4, 4)
    torch.testing.assert_close(torch.mean(s), torch.mean(dense_s))
    torch.testing.assert_close(torch.diagonal(s), torch.diagonal(dense_s))
    torch.testing.assert_close(torch.diagonal(s, 1), torch.diagonal(dense_s, 1))
    torch.testing.assert_close(torch.diagonal(s, 1, 1, 0), torch.diagonal(dense_s, 1, 1, 0))
    torch.testing.assert_close(
        torch.diagonal(s, offset=-2, dim1=-1, dim2=-2), torch.diagonal(dense_s, -2, -1, -2)
    )
    assert torch.diagonal(ScalarTensor(4, 3)).dtype == torch.float32
    torch.testing.assert_close(torch.mm(s, m), torch.mm(dense_s, m))
    torch.testing.assert_close(torch.matmul(s, m), torch.matmul(dense_s, m))
    torch.testing.assert_close(torch.matmul(m.T, s), torch.matmul(m.T, dense_s))
    torch.testing.assert_close(torch.matmul(s, m[:, 0]), torch.matmul(dense_s, m[:, 0]))
    torch.testing.assert_close(torch.mul(s, sq), torch.mul(dense_s, sq))
    torch.testing.assert_close(torch.mul(sq, s), torch.mul(sq, dense_s))
    assert repr(torch.add(s, t)) == "ScalarTensor(N=4, value=1.5)"
    assert repr(torch.add(s, t, alpha=2)) == "ScalarTensor(N=4, value=0.5)"
    assert repr(torch.mul(s, t)) == "ScalarTensor(N=4, value=-2.5)"
    assert repr(torch.mul(s, 2)) == "ScalarTensor(N=4, value=5.0)"
    assert repr(torch.mm(s, t)) == "ScalarTensor(N=4, value=-2.5)"


@pytest.mark.parametrize(
    "call",
    [
        lambda x, d: torch.add(x, d),
        lambda x, d: torch.sum(x),
        lambda x, d: torch.exp(x),
        lambda x, d: torch.mean(x, dim=0),
        lambda x, d: torch.cat([x, d]),
        lambda x, d: torch.where(d > 0, x, d),
    ],
)
def test_other_functions_fall_back_to_dense(call):
    s = ScalarTensor(3, 2.0)
    d = torch.randn(3, 3)
    torch.testing.assert_close(call(s, d), call(s.tensor(), d))


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="torch.add: ScalarTensor sizes differ: N=2 and N=3"):
        torch.add(ScalarTensor(2, 1.0), ScalarTensor(3, 1.0))
    with pytest.raises(ValueError, match=r"torch.mm: ScalarTensor is 3x3 but the other operand has shape \(2, 2\); its dim -2 must have size 3"):
        torch.mm(ScalarTensor(3, 1.0), torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"torch.matmul: ScalarTensor is 3x3 but the other operand has shape \(2, 2\); its dim -1"):
        torch.matmul(torch.ones(2, 2), ScalarTensor(3, 1.0))
    with pytest.raises(ValueError, match=r"torch.mm: both operands must be 2-D matrices, got a ScalarTensor and a 1-D tensor of shape \(3,\); use torch.matmul"):
        torch.mm(ScalarTensor(3, 1.0), torch.ones(3))
    with pytest.raises(TypeError, match=r"torch.mm: ScalarTensor has dtype torch.float32 but the other operand has torch.float64; cast it first"):
        torch.mm(ScalarTensor(3, 1.0), torch.ones(3, 3, dtype=torch.float64))
    with pytest.raises(IndexError, match="torch.diagonal: dim2=2 is out of range for a 2-D ScalarTensor; use 0, 1, -1 or -2"):
        torch.diagonal(ScalarTensor(3, 1.0), 0, 0, 2)
    with pytest.raises(ValueError, match="torch.diagonal: dim1=1 and dim2=-1 are the same dim"):
        torch.diagonal(ScalarTensor(3, 1.0), 0, 1, -1)
    with pytest.raises(ValueError, match="ScalarTensor: N must be a positive int, got 0"):
        ScalarTensor(0, 1.0)
    with pytest.raises(TypeError, match="ScalarTensor: value must be a Python int, float or complex, got str"):
        ScalarTensor(2, "1")
    with pytest.raises(TypeError, match="ScalarTensor: value must be .*, got Fraction; convert it first"):
        ScalarTensor(2, Fraction(1, 3))
    with pytest.raises(ValueError, match="ScalarTensor: int value 1.181e\\+21 does not fit in int64"):
        ScalarTensor(2, 2**70)
