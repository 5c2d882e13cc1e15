"""The registry of loopback address blocks the tests serve their sites on."""

from __future__ import annotations

import ipaddress
import re
from itertools import combinations
from pathlib import Path

import pytest

from tests.support import addresses
from tests.support.addresses import BLOCKS, POLITENESS, RESERVED, Block

TESTS = Path(__file__).resolve().parent
ADDRESS = re.compile(r"\b127\.\d{1,3}\.\d{1,3}\.\d{1,3}\b")


def test_no_two_blocks_overlap() -> None:
    overlapping = [(first.owner, second.owner) for first, second in combinations(BLOCKS, 2)
                   if first.network.overlaps(second.network)]
    assert overlapping == []


def test_every_block_of_the_module_is_in_the_registry_once() -> None:
    declared = [value for value in vars(addresses).values() if isinstance(value, Block)]
    assert sorted(map(str, (b.network for b in declared))) == \
        sorted(map(str, (b.network for b in BLOCKS)))
    assert len(set(BLOCKS)) == len(BLOCKS)


def test_every_block_is_loopback() -> None:
    assert [block.owner for block in BLOCKS if not block.network.is_loopback] == []


def test_a_host_keeps_its_number_inside_its_block() -> None:
    assert (POLITENESS.host(41), POLITENESS.hosts(1, 254)) == \
        ("127.1.5.41", ("127.1.5.1", "127.1.5.254"))


@pytest.mark.parametrize("number", [0, 255, -1])
def test_a_number_outside_the_block_is_refused(number: int) -> None:
    with pytest.raises(ValueError, match=f"{number} is not a host number of 127.1.5.0/24"):
        POLITENESS.host(number)


def test_no_test_writes_an_address_of_a_test_block_by_hand() -> None:
    """Outside the reserved block every address comes from the registry, not a literal."""
    written = {(path.relative_to(TESTS).as_posix(), match)
               for path in TESTS.rglob("*.py") if path.name not in {"addresses.py", "test_addresses.py"}
               for match in ADDRESS.findall(path.read_text())
               if ipaddress.ip_address(match) not in RESERVED.network}
    assert written == set()
