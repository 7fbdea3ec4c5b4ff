"""A settings profile: its records and what makes one valid (:mod:`kvpilot.core.app.profiles`)."""

from __future__ import annotations

from kvpilot.core.app import profiles
from kvpilot.core.app import settings as st
from kvpilot.core.base.goal import Goal
from kvpilot.core.base.plan import ServingSettings


def test_the_settings_module_names_the_profile_records() -> None:
    assert st.Profile is profiles.Profile and st.Settings is profiles.Settings
    assert st.profile_problems is profiles.profile_problems


def test_secrets_are_not_in_repr() -> None:
    p = st.Profile(name="a", api_key="sk-very-secret", hf_token="hf_very_secret")
    assert "sk-very-secret" not in repr(p)
    assert "hf_very_secret" not in repr(st.Settings(profiles=(p,), active_profile="a"))


def _profile_wrong_everywhere(extra_args: str = "") -> st.Profile:
    """A profile with a bad value in every validated field (open host without a key too)."""
    return st.Profile(
        name="x",
        port=0,
        host="0.0.0.0",
        sampling_hz=50,
        theme="neon",
        extra_args=extra_args,
        goal=Goal(use_case="poetry", context_tokens=1, users=0, min_weight_bits=3),
        plan=ServingSettings(
            max_model_len=1,
            max_num_seqs=0,
            kv_cache_dtype="int3",
            gpu_memory_utilization=0.0,
        ),
    )


def test_validate_profile_lists_every_problem() -> None:
    problems = st.validate_profile(_profile_wrong_everywhere())
    keys = {prob.split(":", 1)[0] for prob in problems}
    assert keys == {
        "port",
        "api_key",
        "sampling_hz",
        "theme",
        "use_case",
        "context",
        "users",
        "quality floor",
        "max_model_len",
        "max_num_seqs",
        "kv_cache_dtype",
        "gpu_memory_utilization",
    }


def test_extra_args_with_broken_quoting_are_reported() -> None:
    problems = st.validate_extra_args('--served-model-name "unterminated')
    assert problems and problems[0].startswith("extra_args:")
    assert st.validate_extra_args("") == []


def test_extra_args_that_repeat_a_managed_flag_name_the_setting() -> None:
    (problem,) = st.validate_extra_args("--max-model-len 4096")
    assert problem.startswith("extra_args:")
    assert "context length" in problem  # says which setting to change instead


def test_a_profile_plan_is_the_shared_serving_settings_type() -> None:
    """The profile stores the same ServingSettings a plan, a launch and a measurement use."""
    from kvpilot.core.base.plan import ServingSettings
    from kvpilot.core.vllm.command import LaunchSpec

    plan = ServingSettings(max_model_len=16384, max_num_seqs=2, kv_cache_dtype="fp8",
                           max_num_batched_tokens=2048)
    assert st.Profile(name="p", plan=plan).plan == plan
    spec = LaunchSpec(model="m").with_settings(plan.settings)
    assert (spec.max_model_len, spec.max_num_seqs, spec.kv_cache_dtype,
            spec.max_num_batched_tokens) == (16384, 2, "fp8", 2048)


def test_problems_are_structured_and_each_reset_repairs_its_problem() -> None:
    """Load-time repair uses the problem's ``reset`` field, never the text of its message."""
    bad = _profile_wrong_everywhere(extra_args="--max-model-len 4096")
    problems = st.profile_problems(bad)
    assert [p.text for p in problems] == st.validate_profile(bad)
    assert {p.reset for p in problems} == {
        "port",
        "host",
        "sampling_hz",
        "theme",
        "extra_args",
        "goal.use_case",
        "goal.context_tokens",
        "goal.users",
        "goal.min_weight_bits",
        "plan.max_model_len",
        "plan.max_num_seqs",
        "plan.kv_cache_dtype",
        "plan.gpu_memory_utilization",
    }
    for problem in problems:
        assert problem.reset is not None
        fixed = st._reset_field(bad, problem.reset)
        assert problem.text not in st.validate_profile(fixed), problem
    # the whole repair, as loading a file does it: every field back to a valid default
    settings, warnings = st.settings_from_json(
        {"schema_version": 1, "profiles": [st.profile_to_json(bad)], "active_profile": "x"}
    )
    assert st.profile_problems(settings.active) == []
    assert len(warnings) == len(problems)
    assert settings.active.host == "127.0.0.1"
    assert settings.active.plan.max_model_len is None
    assert settings.active.goal == Goal()
    assert settings.active.extra_args == ""


def test_an_empty_name_is_a_problem_without_a_repair() -> None:
    (problem,) = st.profile_problems(st.Profile(name=" "))
    assert problem.label == "name" and problem.reset is None


def test_a_vllm_choice_that_names_nothing_here_keeps_the_profile_from_being_saved(
    tmp_path,
) -> None:
    exe = tmp_path / "vllm"
    exe.write_text("#!/bin/sh\n")
    good = st.Profile(name="p", vllm_runtime=str(exe))
    assert profiles.problems_here(good) == []
    assert profiles.problems_here(st.Profile(name="p")) == []  # "" = detect automatically
    missing = tmp_path / "gone" / "vllm"
    (problem,) = profiles.problems_here(st.Profile(name="p", vllm_runtime=str(missing)))
    assert problem.startswith(f"vLLM: {missing} does not exist")
    # the profile's own problems come first, the vLLM choice's after them
    both = profiles.problems_here(st.Profile(name="p", port=0, vllm_runtime=str(missing)))
    assert both[:-1] == profiles.validate_profile(st.Profile(name="p", port=0)) and both[:-1]
    assert both[-1] == problem
