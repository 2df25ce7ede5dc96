"""Built-in coding tools: `read`, `write`, `edit`, `bash`, `grep`, `find`, `ls`.

Each factory takes the workspace root that relative paths resolve against. `bash` runs commands
through the `CommandRunner` seam (`LocalRunner` by default); the gateway's sandbox supplies
confining runners built on `run_process`. Output that would flood a model's context is cut by
the shared truncation helpers, with a notice saying what was cut and how to see more.
"""

from agent_core.tools.bash import create_bash_tool
from agent_core.tools.coding import create_coding_tools
from agent_core.tools.edit import create_edit_tool, prepare_edit_arguments
from agent_core.tools.find import create_find_tool
from agent_core.tools.grep import create_grep_tool
from agent_core.tools.ls import create_ls_tool
from agent_core.tools.read import create_read_tool
from agent_core.tools.runner import (
    DEFAULT_OUTPUT_CAP_BYTES,
    CommandResult,
    CommandRunner,
    LocalRunner,
    OutputCallback,
    TailBuffer,
    effective_timeout,
    find_shell,
    run_process,
)
from agent_core.tools.truncate import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_LINES,
    Truncation,
    format_size,
    truncate_head,
    truncate_tail,
)
from agent_core.tools.walk import compile_glob, glob_to_regex
from agent_core.tools.write import create_write_tool

FILE_TOOL_NAMES = ("read", "write", "edit", "grep", "find", "ls")
"""Tools whose `path` argument names a file or directory."""

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_LINES",
    "DEFAULT_OUTPUT_CAP_BYTES",
    "FILE_TOOL_NAMES",
    "CommandResult",
    "CommandRunner",
    "LocalRunner",
    "OutputCallback",
    "TailBuffer",
    "Truncation",
    "compile_glob",
    "create_bash_tool",
    "create_coding_tools",
    "create_edit_tool",
    "create_find_tool",
    "create_grep_tool",
    "create_ls_tool",
    "create_read_tool",
    "create_write_tool",
    "effective_timeout",
    "find_shell",
    "format_size",
    "glob_to_regex",
    "prepare_edit_arguments",
    "run_process",
    "truncate_head",
    "truncate_tail",
]
