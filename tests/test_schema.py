import pytest

from common import schema
from common.errors import UsageError


def test_config_key_is_stable_across_string_and_typed_values():
    typed = dict(
        model="resnet18",
        batch_size=64,
        precision="fp32",
        image_size=224,
        channels_last=False,
        compile=False,
        optimizer="sgd",
        num_classes=1000,
    )
    as_params = {k: str(v).lower() for k, v in typed.items()}  # how MLflow returns params
    assert schema.config_key(typed) == schema.config_key(as_params)
    assert schema.config_key(typed) != schema.config_key({**typed, "batch_size": 32})
    assert len(schema.config_key(typed)) == 16


def test_config_key_ignores_fields_outside_the_key():
    base = dict(
        model="resnet18",
        batch_size=64,
        precision="fp32",
        image_size=224,
        channels_last=False,
        compile=False,
        optimizer="sgd",
        num_classes=1000,
    )
    assert schema.config_key(base) == schema.config_key({**base, "iters": 10, "seed": 3})


def test_sanitize_and_check_key():
    assert schema.sanitize_key("void k<float>(int*)") == "void k_float__int__"
    assert schema.check_key("ncu_dram_bytes") == "ncu_dram_bytes"


@pytest.mark.parametrize(
    "value,literal", [("box", "'box'"), ("bob's box", '"bob\'s box"'), ('a "b"', "'a \"b\"'")]
)
def test_filter_literal_quotes(value, literal):
    assert schema.filter_literal(value) == literal


def test_filter_literal_refuses_both_quote_characters():
    with pytest.raises(UsageError, match="env label .* contains both quote characters"):
        schema.filter_literal('it\'s "x"', "env label")
