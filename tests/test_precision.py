"""Precision by hardware: the CPU's vector ISA, oneDNN's cap, and "auto".

The CPUs are synthetic `/proc/cpuinfo` flag sets (and environments), so that
every case runs on any machine: the real CPU is never consulted.
"""

from unittest import mock

import keras
import pytest
import tensorflow as tf

from keras_vit.recipes import engine
from keras_vit.recipes.configs import base
from keras_vit.training import hardware
from keras_vit.training import precision

# Flags as Linux lists them (the relevant ones, and a few bystanders).
SANDY_BRIDGE = frozenset({"fpu", "sse4_1", "sse4_2", "popcnt", "aes", "avx"})
ZEN3 = SANDY_BRIDGE | {"avx2", "fma", "f16c", "bmi2", "sha_ni", "vaes"}
SKYLAKE_X = ZEN3 | {"avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl"}
ZEN4 = SKYLAKE_X | {
    "avx512ifma",
    "avx512vbmi",
    "avx512_vbmi2",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_bitalg",
    "avx512_vpopcntdq",
}
SAPPHIRE_RAPIDS = ZEN4 | {"avx512_fp16", "amx_tile", "amx_int8", "amx_bf16"}
NO_CAP = {}
REAL_ACCELERATOR = precision._accelerator


@pytest.mark.parametrize(
    "flags, isa",
    [
        (frozenset(), "baseline"),
        (frozenset({"fpu", "sse4_1", "sse4_2"}), "baseline"),
        (SANDY_BRIDGE, "AVX"),
        (ZEN3, "AVX2"),
        (SKYLAKE_X, "AVX-512"),
        (ZEN4, "AVX-512+BF16"),
        (SAPPHIRE_RAPIDS, "AMX"),
        # Each class needs the ones below it, as oneDNN's dispatcher does.
        (ZEN3 | {"avx512_bf16", "avx512_vnni"}, "AVX2"),
        (SKYLAKE_X - {"avx512bw"}, "AVX2"),
        (SKYLAKE_X | {"amx_bf16", "amx_tile"}, "AVX-512"),
        (ZEN4 | {"amx_bf16"}, "AVX-512+BF16"),
    ],
)
def test_vector_isa_is_the_widest_class_of_the_flags(flags, isa):
    assert hardware.vector_isa(flags, env=NO_CAP) == isa
    assert hardware.native_bfloat16(flags, env=NO_CAP) == (
        isa in ("AMX", "AVX-512+BF16")
    )


@pytest.mark.parametrize(
    "cap, isa",
    [
        ("SSE41", "baseline"),
        ("AVX", "AVX"),
        ("AVX2", "AVX2"),
        ("AVX2_VNNI", "AVX2"),
        ("AVX2_VNNI_2", "AVX2"),
        ("AVX512_CORE", "AVX-512"),
        ("AVX512_CORE_VNNI", "AVX-512"),
        ("AVX512_CORE_BF16", "AVX-512+BF16"),
        ("AVX10_1_512", "AVX-512+BF16"),
        ("AVX512_CORE_FP16", "AVX-512+BF16"),
        ("AVX10_1_512_AMX", "AMX"),
        ("AVX512_CORE_AMX", "AMX"),
        ("AVX10_1_512_AMX_FP16", "AMX"),
        ("AVX512_CORE_AMX_FP16", "AMX"),
        ("ALL", "AMX"),
        ("DEFAULT", "AMX"),
        ("avx2", "AVX2"),  # oneDNN reads the value case-insensitively
        ("", "AMX"),  # empty: unset
    ],
)
def test_onednn_cap_lowers_an_amx_machine(cap, isa):
    env = {"ONEDNN_MAX_CPU_ISA": cap}
    assert hardware.vector_isa(SAPPHIRE_RAPIDS, env=env) == isa
    # The older name works the same.
    assert hardware.vector_isa(SAPPHIRE_RAPIDS, env={"DNNL_MAX_CPU_ISA": cap}) == isa


def test_a_cap_above_the_machine_does_not_raise_its_class():
    for cap in ("AVX512_CORE_AMX", "AVX512_CORE_BF16", "AVX512_CORE", "ALL"):
        env = {"ONEDNN_MAX_CPU_ISA": cap}
        assert hardware.vector_isa(ZEN3, env=env) == "AVX2", cap
        assert not hardware.native_bfloat16(ZEN3, env=env), cap
    env = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}
    assert hardware.vector_isa(ZEN4, env=env) == "AVX-512+BF16"


def test_the_cap_takes_away_native_bfloat16():
    assert hardware.native_bfloat16(ZEN4, env=NO_CAP)
    assert not hardware.native_bfloat16(ZEN4, env={"ONEDNN_MAX_CPU_ISA": "AVX2"})
    amx_capped = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}
    assert hardware.native_bfloat16(SAPPHIRE_RAPIDS, env=amx_capped)


def test_onednn_name_wins_over_the_older_dnnl_name():
    env = {"ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX512_CORE_BF16"}
    assert hardware.vector_isa(SAPPHIRE_RAPIDS, env=env) == "AVX2"
    env = {"ONEDNN_MAX_CPU_ISA": "", "DNNL_MAX_CPU_ISA": "AVX512_CORE"}
    assert hardware.vector_isa(SAPPHIRE_RAPIDS, env=env) == "AVX-512"


@pytest.mark.parametrize("variable", ["ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"])
def test_an_unknown_cap_is_refused_naming_variable_and_value(variable):
    with pytest.raises(ValueError, match=rf"Unknown {variable}='AVX3'\. oneDNN knows"):
        hardware.vector_isa(ZEN3, env={variable: "AVX3"})
    with pytest.raises(ValueError, match=variable):
        hardware.native_bfloat16(ZEN3, env={variable: "AVX512"})


def test_the_environment_is_os_environ_by_default(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX")
    assert hardware.vector_isa(SAPPHIRE_RAPIDS) == "AVX"
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    assert hardware.vector_isa(SAPPHIRE_RAPIDS) == "AMX"


def test_describe_cpu_names_the_class_and_its_cap():
    assert hardware.describe_cpu(ZEN3, env=NO_CAP) == "AVX2"
    assert hardware.describe_cpu(SAPPHIRE_RAPIDS, env=NO_CAP) == "AMX"
    env = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}
    assert hardware.describe_cpu(SAPPHIRE_RAPIDS, env=env) == (
        "AVX-512+BF16 (capped from AMX by ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16)"
    )
    env = {"DNNL_MAX_CPU_ISA": "avx2"}
    assert hardware.describe_cpu(ZEN4, env=env) == (
        "AVX2 (capped from AVX-512+BF16 by DNNL_MAX_CPU_ISA=avx2)"
    )
    # A cap that changes nothing is not mentioned.
    assert hardware.describe_cpu(ZEN3, env={"ONEDNN_MAX_CPU_ISA": "AVX2"}) == "AVX2"
    assert hardware.describe_cpu(frozenset(), env=NO_CAP) == (
        "baseline (no CPU flags read)"
    )
    assert "\n" not in hardware.describe_cpu()


def test_cpu_flags_reads_the_first_processor(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\n"
        "model name\t: AMD Ryzen 9 5950X 16-Core Processor\n"
        "flags\t\t: fpu sse4_2 avx avx2 fma\n"
        "bugs\t\t: sysret_ss_attrs\n\n"
        "processor\t: 1\n"
        "flags\t\t: fpu\n"
    )
    flags = hardware.cpu_flags(str(cpuinfo))
    assert flags == frozenset({"fpu", "sse4_2", "avx", "avx2", "fma"})
    assert hardware.vector_isa(flags, env=NO_CAP) == "AVX2"
    # Not Linux (no file), or not x86 (aarch64 lists `Features`): no flags.
    assert hardware.cpu_flags(str(tmp_path / "missing")) == frozenset()
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")
    assert hardware.cpu_flags(str(arm)) == frozenset()
    assert isinstance(hardware.cpu_flags(), frozenset)


# -- precision -------------------------------------------------------------


@pytest.fixture
def on_cpu(monkeypatch):
    """Makes this machine a CPU (no GPU) with the given flags and cap."""

    def make(flags, cap=None):
        monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset(flags))
        monkeypatch.setattr(precision, "_accelerator", lambda strategy: None)
        monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
        if cap is None:
            monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
        else:
            monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)

    return make


@pytest.mark.parametrize("auto", ["auto", True])
def test_auto_keeps_float32_on_a_cpu_without_native_bfloat16(on_cpu, auto):
    on_cpu(ZEN3)
    assert precision.precision_policy(auto) == "float32"
    assert precision.resolve_precision(auto) == (
        "float32",
        "auto: this CPU is AVX2, no native bfloat16",
    )
    on_cpu(SKYLAKE_X)
    assert precision.resolve_precision(auto) == (
        "float32",
        "auto: this CPU is AVX-512, no native bfloat16",
    )


@pytest.mark.parametrize("auto", ["auto", True])
def test_auto_picks_bfloat16_on_a_cpu_with_native_bfloat16(on_cpu, auto):
    on_cpu(ZEN4)
    assert precision.resolve_precision(auto) == (
        "mixed_bfloat16",
        "auto: this CPU is AVX-512+BF16, native bfloat16",
    )
    on_cpu(SAPPHIRE_RAPIDS)
    assert precision.resolve_precision(auto) == (
        "mixed_bfloat16",
        "auto: this CPU is AMX, native bfloat16",
    )
    assert precision.set_precision(auto) == "mixed_bfloat16"
    assert keras.config.dtype_policy().name == "mixed_bfloat16"


def test_auto_follows_the_onednn_cap(on_cpu):
    on_cpu(SAPPHIRE_RAPIDS, cap="AVX2")
    assert precision.resolve_precision("auto") == (
        "float32",
        "auto: this CPU is AVX2 (capped from AMX by ONEDNN_MAX_CPU_ISA=AVX2), "
        "no native bfloat16",
    )
    on_cpu(ZEN3, cap="AVX512_CORE_AMX")  # a cap does not add bfloat16
    assert precision.precision_policy("auto") == "float32"
    on_cpu(ZEN3, cap="AVX3")
    with pytest.raises(ValueError, match="ONEDNN_MAX_CPU_ISA='AVX3'"):
        precision.precision_policy("auto")


def test_explicit_choices_are_honoured_on_any_cpu(on_cpu):
    on_cpu(ZEN3)
    policy, reason = precision.resolve_precision("bfloat16")
    assert policy == "mixed_bfloat16"
    assert reason == (
        "asked for; this CPU is AVX2, no native bfloat16: float32 is likely faster"
    )
    assert precision.resolve_precision("float16") == ("mixed_float16", "asked for")
    for full in (False, "float32"):
        assert precision.resolve_precision(full) == ("float32", "asked for")
    on_cpu(ZEN4)
    assert precision.resolve_precision("bfloat16") == ("mixed_bfloat16", "asked for")
    assert precision.resolve_precision(False) == ("float32", "asked for")


def test_accelerators_decide_auto_whatever_the_host_cpu(on_cpu, monkeypatch):
    on_cpu(ZEN3)
    tpu = mock.Mock(spec=tf.distribute.TPUStrategy)
    monkeypatch.setattr(precision, "_accelerator", REAL_ACCELERATOR)
    assert precision.resolve_precision("auto", tpu) == ("mixed_bfloat16", "auto: TPU")
    assert precision.resolve_precision(True, tpu)[0] == "mixed_bfloat16"
    # A GPU: float16 (with loss scaling), as before "auto" existed.
    monkeypatch.setattr(precision, "_accelerator", lambda strategy: "GPU")
    assert precision.resolve_precision("auto") == (
        "mixed_float16",
        "auto: GPU, with loss scaling",
    )
    assert precision.resolve_precision("bfloat16") == ("mixed_bfloat16", "asked for")


def test_unknown_settings_are_refused():
    for bad in ("auto2", "mixed_bfloat16", None):
        with pytest.raises(ValueError, match=r"Unknown mixed_precision=.*auto"):
            precision.precision_policy(bad)


# -- recipes ---------------------------------------------------------------


def test_the_recipe_config_accepts_auto():
    assert base.PRECISIONS == precision.PRECISIONS
    assert base.TrainConfig(mixed_precision="auto").mixed_precision == "auto"
    config = base.override(base.TrainConfig(), ["mixed_precision=auto"])
    assert config.mixed_precision == "auto"
    config = base.override(base.PretrainConfig(), ["mixed_precision='auto'"])
    assert config.mixed_precision == "auto"


def test_the_recipe_config_refuses_other_words_naming_the_field():
    with pytest.raises(base.ConfigError, match=r"^mixed_precision='auto2': must be"):
        base.override(base.TrainConfig(), ["mixed_precision=auto2"])
    with pytest.raises(base.ConfigError, match=r"mixed_precision='auto2'.*'auto'"):
        base.TrainConfig(mixed_precision="auto2")


def test_setup_says_what_precision_it_picked_and_why(on_cpu, capsys):
    on_cpu(ZEN3)
    config = base.TrainConfig(mixed_precision="auto", strategy="default", verbose=1)
    run = engine.setup(config, "train")
    assert run.policy == "float32"
    assert keras.config.dtype_policy().name == "float32"
    out = capsys.readouterr().out
    assert "; precision float32 (auto: this CPU is AVX2, no native bfloat16).\n" in out
    on_cpu(ZEN4)
    run = engine.setup(config, "train")
    assert run.policy == "mixed_bfloat16"
    assert keras.config.dtype_policy().name == "mixed_bfloat16"
    out = capsys.readouterr().out
    assert "precision mixed_bfloat16 (auto: this CPU is AVX-512+BF16, native" in out
