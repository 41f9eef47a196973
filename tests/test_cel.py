"""CEL as Kubernetes' admission policies evaluate it: optional syntax, the Kubernetes libraries, equality."""

from __future__ import annotations

from typing import Any

import pytest

from itbench_gym.policy.cel.engine import CelError, check_references, compile_cel

POD = {"metadata": {"name": "web", "labels": {"app": "shop"}, "annotations": None},
       "spec": {"containers": [{"name": "a", "image": "nginx:1.27", "resources": {"limits": {"memory": "512Mi"}}},
                               {"name": "b", "image": "busybox:latest", "securityContext": {"privileged": True}}]}}


def run(expression: str, **variables: Any) -> Any:
    return compile_cel(expression).evaluate({"object": POD, **variables})


@pytest.mark.parametrize(("expression", "expected"), [
    # optional selection and indexing: absent (or null) fields are none, present ones are kept
    ("object.spec.?hostNetwork.orValue(false)", False),
    ("object.metadata.?labels[?'app'].orValue('')", "shop"),
    ("object.metadata.?annotations[?'team'].orValue('none')", "none"),
    ("object.spec.?template.spec.containers.orValue([]).size()", 0),
    ("object.spec.containers[?5].hasValue()", False),
    ("object.spec.containers.all(c, !c.?securityContext.?privileged.orValue(false))", False),
    ("optional.of(1).or(optional.of(2)).value()", 1),
    ("optional.none().or(optional.of(2)).value()", 2),
    ("optional.ofNonZeroValue('').hasValue()", False),
    # cel-go's string extensions and Kubernetes' list, regex and quantity libraries
    ("object.spec.containers.map(c, c.image.split(':')[1]).join('/')", "1.27/latest"),
    ("'Hello'.lowerAscii() + 'x'.upperAscii()", "helloX"),
    ("'a-b-c'.replace('-', '+', 1)", "a+b-c"),
    ("'images'.substring(1, 3) + 'abc'.charAt(2)", "mac"),
    ("'abcabc'.indexOf('c') + 'abcabc'.lastIndexOf('c')", 7),
    ("[1, 2, 3].sum() + [4, 9].max() + [1, 2].indexOf(2)", 16),
    ("[1, 3, 2].isSorted()", False),
    ("'v1.2.3-rc1'.find('[0-9]+') + ':' + 'a1b22c333'.findAll('[0-9]+', 2).join(',')", "1:1,22"),
    ("quantity(object.spec.containers[0].resources.limits.memory).isLessThan(quantity('1Gi'))", True),
    ("quantity('1.5').add(quantity('500m')).asInteger()", 2),
    ("isQuantity('12Mi') && !isQuantity('twelve')", True),
    # Kubernetes' URL, IP and CIDR libraries and cel-go's format
    ("url('https://user@example.com:8443/a?x=1&x=2').getHost()", "example.com:8443"),
    ("url('https://[::1]:80/').getHostname() + '|' + url('https://example.com/').getPort()", "::1|"),
    ("url('https://example.com/a?x=1&x=2').getQuery().x", ["1", "2"]),
    ("isURL('/absolute') && !isURL('example.com')", True),
    ("ip('10.0.0.1').family() == 4 && ip('::1').isLoopback() && ip('8.8.8.8').isGlobalUnicast()", True),
    ("isIP('::ffff:1.2.3.4') || isIP('fe80::1%eth0')", False),
    ("cidr('10.0.0.0/8').containsIP('10.1.2.3') && !cidr('10.0.0.0/8').containsIP(ip('11.0.0.1'))", True),
    ("string(cidr('192.168.0.1/24').masked()) + ' ' + string(cidr('192.168.0.1/24').ip())", "192.168.0.0/24 192.168.0.1"),
    ("cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16') && cidr('10.0.0.0/8').prefixLength() == 8", True),
    ("'%s has %d pods (%.1f%%), mask %x'.format(['web', 3, 12.5, 255])", "web has 3 pods (12.5%), mask ff"),
    # heterogeneous equality: different types are unequal, numbers compare by value
    ("object.metadata.labels == 'shop'", False),
    ("dyn(1) == 1.0 && dyn(2u) == 2 && dyn(1) != 1.5", True),
    ("[1, 'a'] != [1, 'b']", True),
    ("object.metadata.annotations == null", True),
])
def test_kubernetes_cel(expression: str, expected: Any) -> None:
    assert run(expression) == expected


def test_errors_name_the_expression_and_where_it_went_wrong() -> None:
    with pytest.raises(CelError, match=r"syntax error at line 1, column 27"):
        compile_cel("object.spec.containers.all(")
    with pytest.raises(CelError, match=r"no such key: 'hostNetwork' evaluating 'object.spec.hostNetwork'"):
        run("object.spec.hostNetwork")
    with pytest.raises(CelError, match="optional.none\\(\\) dereference"):
        run("object.spec.?hostNetwork.value()")
    with pytest.raises(CelError, match="invalid quantity"):
        run("quantity('a lot')")
    with pytest.raises(CelError, match="IPv4-mapped IPv6 address"):
        run("ip('::ffff:1.2.3.4')")
    with pytest.raises(CelError, match="too many arguments supplied to string.format"):
        run("'%s'.format(['a', 'b'])")


def test_logical_operators_absorb_errors_they_do_not_need() -> None:
    assert run("object.spec.?initContainers.hasValue() && object.spec.initContainers.size() > 0") is False
    assert run("true || object.spec.volumes.exists(v, has(v.hostPath))") is True
    assert run("object.metadata.annotations == null || object.metadata.annotations.exists(k, k == 'x')") is True


def test_references_are_checked_as_kubernetes_compiles_them() -> None:
    declared = frozenset({"object"})
    check_references("object.spec.containers.all(c, c.?env.orValue([]).exists(e, e.name == 'X'))", declared)
    check_references("[1, 2].map(x, x * 2).filter(y, y > 2).size() == 1", declared)
    with pytest.raises(CelError, match="undeclared reference to 'e' at line 1, column 38"):
        check_references("object.spec.containers.all(c, c.x && e.y)", declared)
    with pytest.raises(CelError, match="undeclared reference to 'oldObject'"):
        check_references("oldObject.spec == object.spec", declared)
    with pytest.raises(CelError, match="the CEL function quote\\(\\) is not supported"):
        check_references("object.metadata.name.quote()", declared)
