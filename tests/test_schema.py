import re

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


def test_config_key_values_are_those_stores_hold():
    """Keys already in tracking stores: the hash sorts the field names, so the order the report
    lists them in (CONFIG_KEY_FIELDS) changes none of them."""
    cfg = dict(
        model="resnet18",
        batch_size=16,
        precision="fp32",
        image_size=224,
        channels_last=False,
        compile=False,
        optimizer="sgd",
        num_classes=1000,
    )
    assert schema.config_key(cfg) == "2f52cf5e32d71239"
    ddp = dict(cfg, world_size=2, distributed="ddp", zero_stage=0, backend="gloo")
    assert schema.config_key(ddp) == "89ebf42e1ceccc42"


def test_comparison_keys_are_where_and_every_config_field_but_the_ones_compared():
    assert schema.comparison_keys("precision") == [
        "env_label",
        "device_name",
        "model",
        "batch_size",
        "image_size",
        "num_classes",
        "channels_last",
        "compile",
        "optimizer",
        "distributed",
        "zero_stage",
        "world_size",
        "backend",
    ]
    assert set(schema.comparison_keys()) == {"env_label", "device_name", *schema.CONFIG_FIELDS}
    with pytest.raises(ValueError, match="not configuration fields: seed"):
        schema.comparison_keys("seed")


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


@pytest.mark.parametrize(
    "label, why",
    [
        ("x" * 8001, "is 8001 characters long: use at most 100"),
        ("x" * 243, "is 243 characters long: use at most 100"),
        ("box\nrm -rf", "contains a line break or another control character"),
        ("box\x1b[31m", "contains a line break or another control character"),
        ("L4, spot", "contains a comma, which separates labels in analysis --env-label"),
        ('it\'s "x"', "contains both quote characters ' and \"; rename it"),
    ],
)
def test_env_label_refused_with_the_rule_it_breaks(label, why):
    with pytest.raises(ValueError, match="^env_label .*" + re.escape(why)):
        schema.env_label(label)


def test_env_label_accepts_one_line_of_up_to_100_characters_and_defaults_to_the_host():
    for label in ("x" * 100, "L4 (GCP spot) / torch 2.14", "it's mine", 'the "big" box', "Müller"):
        assert schema.env_label(label) == label
    assert schema.env_label("  padded ") == "padded"
    assert schema.env_label("") == schema.env_label(None) == schema.host_name()


def test_slug_of_a_long_label_is_bounded_and_still_unique():
    from common.fmt import SLUG_MAX_CHARS, slug

    a, b = "x" * 300 + "a", "x" * 300 + "b"  # labels recorded before labels were bounded
    assert len(slug(a)) == SLUG_MAX_CHARS and slug(a) != slug(b)
    assert slug("short label") == "short_label"
