"""kd_loss_library: a library of registered losses (each registers itself at start-up)."""

def kd_loss_library(name, srcs, deps = [], **kwargs):
    """A cc_library of losses with what every loss uses, linked whole so registrations stay.

    Args:
      name: target name.
      srcs: the .cc files; each registers its losses with KD_REGISTER(LossRegistry(), ...).
      deps: more dependencies.
      **kwargs: passed to cc_library.
    """
    native.cc_library(
        name = name,
        srcs = srcs,
        deps = [
            "//distill/losses:loss",
            "//distill/losses:torchdistill_rule",
            "//base:ivalue_util",
            "//base:kwargs",
            "//base:status_macros",
            "//base:torch_status",
            "@com_google_absl//absl/strings",
            "@libtorch",
        ] + deps,
        alwayslink = True,
        **kwargs
    )
