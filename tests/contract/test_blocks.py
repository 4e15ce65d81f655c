"""Block defaults and (de)serialisation: no positions means the shared empty tuple."""

from __future__ import annotations

from include.contract import Block, BlockKind, Position


def test_blocks_without_positions_share_one_empty_tuple() -> None:
    a, b = Block(BlockKind.PARAGRAPH, "a"), Block(BlockKind.PARAGRAPH, "b")
    assert a.positions == () and a.positions is b.positions  # no list allocated per block
    assert a.heading_path == [] and a.heading_path is not b.heading_path  # lists stay per block


def test_round_trip_keeps_positions_and_their_absence() -> None:
    plain = Block(BlockKind.PARAGRAPH, "text")
    placed = Block(BlockKind.PARAGRAPH, "text", positions=[Position(page=2, line=7)])
    assert "positions" not in plain.to_dict()
    assert Block.from_dict(plain.to_dict()).positions == ()
    restored = Block.from_dict(placed.to_dict())
    assert list(restored.positions) == [Position(page=2, line=7)]
    assert Block.from_dict({"kind": "paragraph", "text": "x", "positions": []}).positions == ()
