"""``make demo-environments`` takes ``DEMO_PORT`` / ``DEMO_MESH_PORT`` as ``make demo``
does: staging on them, prod 100 above, 0 for free ones; without them the example's."""

from __future__ import annotations

import pytest

from reconciler import demo_environments


def test_without_demo_port_the_example_ports_with_a_fallback() -> None:
    assert demo_environments.ports({}) == (demo_environments.PORTS, False)
    assert demo_environments.ports({"DEMO_PORT": " "}) == (demo_environments.PORTS, False)


def test_demo_port_chooses_staging_and_prod_above_it() -> None:
    chosen, asked = demo_environments.ports({"DEMO_PORT": "19443"})
    assert asked and chosen == {"staging": (19443, 19444), "prod": (19543, 19544)}
    chosen, _ = demo_environments.ports({"DEMO_PORT": "19443", "DEMO_MESH_PORT": "20000"})
    assert chosen == {"staging": (19443, 20000), "prod": (19543, 20100)}


def test_demo_port_zero_is_any_free_port_for_both() -> None:
    chosen, asked = demo_environments.ports({"DEMO_PORT": "0", "DEMO_MESH_PORT": "0"})
    assert asked and chosen == {"staging": (0, 0), "prod": (0, 0)}


@pytest.mark.parametrize("bad", ["http", "-1", "65500"])
def test_a_demo_port_that_is_no_port_is_refused(bad: str) -> None:
    with pytest.raises(SystemExit, match="DEMO_PORT"):
        demo_environments.ports({"DEMO_PORT": bad})
