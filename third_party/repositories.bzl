"""Repository rules that work from any workspace, offline."""

def _offline_stand_in_impl(ctx):
    for path, content in ctx.attr.files.items():
        ctx.file(path, content)

offline_stand_in = repository_rule(
    implementation = _offline_stand_in_impl,
    attrs = {"files": attr.string_dict(doc = "file path -> content")},
    doc = "A repository made of the given files; replaces one Bazel would download.",
)

def _system_library_impl(ctx):
    # Link the parts of /usr the BUILD file refers to; the compiler finds /usr/include itself.
    for sub in ["include", "lib", "bin"]:
        ctx.symlink(ctx.path("/usr/" + sub), sub)
    ctx.file("WORKSPACE", "")
    ctx.file("BUILD.bazel", ctx.attr.build_file_content)

system_library = repository_rule(
    implementation = _system_library_impl,
    attrs = {"build_file_content": attr.string(mandatory = True)},
    local = True,
    doc = "A library installed under /usr by a Debian -dev package.",
)
