"""optgen.torch.AdamMini against its authors' Adam_mini (adam-mini 1.1.1 from PyPI; skipped without it)
on a GPU: a small transformer's named parameters, one of each of Adam_mini's partition rules (an
embedding, queries and keys by head, values, projections, MLPs and the output by neuron, norms as
one block, biases per element), in float32, and checkpoints moved both ways."""

import copy

import pytest

torch = pytest.importorskip("torch")
adam_mini = pytest.importorskip("adam_mini", reason="adam-mini is not installed (pip install adam-mini==1.1.1)")
import optgen.torch as ot  # noqa: E402

pytestmark = pytest.mark.gpu
DIM, HEADS, KV_HEADS = 16, 4, 2
CONFIG = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
# Both compute Adam-mini's update in float32 with the same operations, in another order and with
# the block means reduced in another order: a few ulp a step.
RTOL, ATOL = 1e-5, 1e-6


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(DIM)
        self.q_proj = torch.nn.Linear(DIM, DIM, bias=False)
        self.k_proj = torch.nn.Linear(DIM, DIM * KV_HEADS // HEADS, bias=False)  # grouped-query keys
        self.v_proj = torch.nn.Linear(DIM, DIM * KV_HEADS // HEADS, bias=False)
        self.o_proj = torch.nn.Linear(DIM, DIM, bias=False)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(DIM, 3 * DIM), torch.nn.Linear(3 * DIM, DIM))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(50, DIM)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.norm = torch.nn.LayerNorm(DIM)
        self.lm_head = torch.nn.Linear(DIM, 50, bias=False)
        self.scale = torch.nn.Parameter(torch.ones(7))  # no rule: one block


def published(model):
    opt = adam_mini.Adam_mini(model.named_parameters(), dim=DIM, n_heads=HEADS, n_kv_heads=KV_HEADS, verbose=False,
                              **CONFIG)
    opt.world_size = 1  # it reads torch.cuda.device_count(), and all-gathers a norm's size over more than one
    return opt


def ours(model):
    return ot.AdamMini(model.named_parameters(), dim=DIM, n_heads=HEADS, n_kv_heads=KV_HEADS, **CONFIG)


def step(models_and_optimizers, step_index):
    g = torch.Generator(device="cuda").manual_seed(100 + step_index)
    grads = {n: torch.randn(p.shape, generator=g, device="cuda")
             for n, p in models_and_optimizers[0][0].named_parameters()}
    for model, opt in models_and_optimizers:
        for n, p in model.named_parameters():
            p.grad = grads[n].clone()
        opt.step()


def assert_same(a, b):
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        torch.testing.assert_close(p, q, rtol=RTOL, atol=ATOL, msg=lambda m: f"{name}: {m}")


def test_adam_mini_steps_as_its_authors_code():
    theirs_model, ours_model = Model().cuda(), Model().cuda()
    theirs, mine = published(theirs_model), ours(ours_model)
    for i in range(10):
        step([(theirs_model, theirs), (ours_model, mine)], i)
    assert_same(ours_model, theirs_model)
    moved = Model().cuda()
    assert not torch.equal(moved.lm_head.weight, ours_model.lm_head.weight)
    # The partition: one second moment per head of a query and a key, per neuron, per norm, per bias element.
    state = mine.state_dict()["state"]
    shapes = {name: tuple(state[i]["vmean" if "vmean" in state[i] else "v"].shape)
              for i, (name, _) in enumerate(ours_model.named_parameters())}
    assert shapes["blocks.0.q_proj.weight"] == (HEADS, 1)
    assert shapes["blocks.0.k_proj.weight"] == (KV_HEADS, 1)
    assert shapes["blocks.0.v_proj.weight"] == (DIM * KV_HEADS // HEADS, 1)
    assert shapes["embed.weight"] == (50, 1)
    assert shapes["norm.weight"] == ()
    assert shapes["blocks.0.mlp.0.bias"] == (3 * DIM,)


@pytest.mark.parametrize("direction", ["published_to_optgen", "optgen_to_published"])
def test_checkpoints_move_between_optgen_and_adam_mini(direction):
    source_model, target_model = Model().cuda(), Model().cuda()
    make = {"optgen": ours, "published": published}
    source_kind, target_kind = direction.split("_to_")
    source = make[source_kind](source_model)
    for i in range(4):
        step([(source_model, source)], i)
    target_model.load_state_dict(source_model.state_dict())
    target = make[target_kind](target_model)
    target.load_state_dict(copy.deepcopy(source.state_dict()))
    for i in range(4, 8):
        step([(source_model, source), (target_model, target)], i)
    assert_same(target_model, source_model)


def test_a_query_that_is_not_whole_heads_is_refused():
    model = Model().cuda()
    opt = ot.AdamMini(model.named_parameters(), dim=DIM, n_heads=3, **CONFIG)  # 16 * 16 / 3 is not whole
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    with pytest.raises(ValueError, match="whole number of heads"):
        opt.step()
