import pytest
import torch

from kernels import expand_qsa_block_indices
from kernels import reference as ref

from _helpers import INT_POISON


@pytest.mark.parametrize("token_topk,ratio", [(16, 4), (64, 1), (2048, 4), (96, 8), (30, 3)])
@pytest.mark.parametrize("position_dtype", [torch.int32, torch.int64])
def test_expand_matches_reference(device, token_topk, ratio, position_dtype):
    gen = torch.Generator().manual_seed(token_topk + ratio)
    block_topk = token_topk // ratio
    rows = 9
    positions = torch.randint(0, 5000, (rows,), generator=gen).to(position_dtype)
    positions[: ratio + 1] = torch.arange(ratio + 1)  # every tail length, including none
    visible = torch.randint(0, 2 * block_topk + 1, (rows,), generator=gen, dtype=torch.int32)
    visible[0], visible[1], visible[2] = 0, block_topk, max(block_topk - 1, 0)
    blocks = torch.randint(0, 1000, (rows, block_topk), generator=gen, dtype=torch.int32)
    blocks[3, block_topk // 2 :] = -1  # -1 entries expand to -1
    out = torch.full((rows, token_topk + ratio), INT_POISON, dtype=torch.int32)
    out_dev = out.to(device)
    expand_qsa_block_indices(
        blocks.to(device), positions.to(device), visible.to(device), ratio, token_topk, out_dev
    )
    want = ref.expand_block_indices(blocks, positions, visible, ratio, token_topk)
    assert torch.equal(out_dev.cpu().long(), want)


def test_expand_unaligned_views(device):
    gen = torch.Generator().manual_seed(2)
    token_topk, ratio, rows = 32, 4, 5
    blocks_all = torch.randint(0, 50, (rows + 1, 8), generator=gen, dtype=torch.int32)
    pos_all = torch.randint(0, 400, (rows + 1,), generator=gen, dtype=torch.int32)
    vis_all = torch.randint(0, 9, (rows + 1,), generator=gen, dtype=torch.int32)
    out_all = torch.full((rows + 2, token_topk + ratio), INT_POISON, dtype=torch.int32).to(device)
    expand_qsa_block_indices(
        blocks_all[1:].to(device),
        pos_all[1:].to(device),
        vis_all[1:].to(device),
        ratio,
        token_topk,
        out_all[1 : rows + 1],
    )
    got = out_all.cpu()
    want = ref.expand_block_indices(blocks_all[1:], pos_all[1:], vis_all[1:], ratio, token_topk)
    assert torch.equal(got[1 : rows + 1].long(), want)
    assert (got[0] == INT_POISON).all() and (got[rows + 1] == INT_POISON).all()


def test_expand_bad_input():
    blocks = torch.zeros(2, 4, dtype=torch.int32)
    pos = torch.zeros(2, dtype=torch.int32)
    vis = torch.zeros(2, dtype=torch.int32)
    with pytest.raises(ValueError, match="out"):
        expand_qsa_block_indices(blocks, pos, vis, 4, 16, torch.zeros(2, 19, dtype=torch.int32))
    with pytest.raises(ValueError, match="token_topk"):
        expand_qsa_block_indices(blocks, pos, vis, 4, 17, torch.zeros(2, 21, dtype=torch.int32))
    with pytest.raises(TypeError, match="query_positions"):
        expand_qsa_block_indices(
            blocks, pos.float(), vis, 4, 16, torch.zeros(2, 20, dtype=torch.int32)
        )
