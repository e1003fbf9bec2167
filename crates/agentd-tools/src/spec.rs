//! The tool catalogue offered to providers: names, descriptions and argument schemas.
//!
//! Schemas are written for strict function calling (OpenAI `strict: true`): every
//! property is listed in `required`, optional ones accept `null` (meaning "use the
//! default"), and `additionalProperties` is false. Providers without strict mode accept
//! the same schemas; the argument decoders accept a missing optional as `null`.

use agentd_proto::replay::ToolSpec;
use serde_json::{json, Value};

/// Every tool name a `tool_call` may use, in catalogue order.
pub const KNOWN_TOOLS: [&str; 9] = [
    "read_file",
    "list_dir",
    "search",
    "write_file",
    "edit_file",
    "apply_patch",
    "shell",
    "git_config",
    "memory_apply",
];

/// True for a tool name agentd knows (including `memory_apply`, run by the session).
pub fn is_known(name: &str) -> bool {
    KNOWN_TOOLS.contains(&name)
}

/// True for tools that change the workspace or run commands; `ask` mode asks before
/// these and `read_only` refuses them.
pub fn is_mutating(name: &str) -> bool {
    matches!(
        name,
        "write_file" | "edit_file" | "apply_patch" | "shell" | "git_config"
    )
}

fn object(props: Value) -> Value {
    let required: Vec<String> = props
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    json!({
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": false,
    })
}

fn spec(name: &str, description: &str, parameters: Value) -> ToolSpec {
    ToolSpec {
        name: name.to_string(),
        description: description.to_string(),
        parameters,
    }
}

/// Specs of the workspace tools (`memory_apply`'s spec belongs to its own module).
pub fn specs() -> Vec<ToolSpec> {
    vec![
        spec(
            "read_file",
            "Read a text file in the workspace. Paths are relative to the workspace root \
             (absolute paths must be inside it). Returns the file's text (invalid UTF-8 \
             shown as U+FFFD); `offset_line` (1-based) and `limit_lines` select a range of \
             lines. Output over 16 KiB is cut with a marker. A PNG, JPEG, GIF or WebP image \
             (read whole) is attached for you to see, up to 5 MiB.",
            object(json!({
                "path": {"type": "string", "description": "File path, relative to the workspace root."},
                "offset_line": {"type": ["integer", "null"], "minimum": 1,
                    "description": "First line to return, 1-based (null: 1)."},
                "limit_lines": {"type": ["integer", "null"], "minimum": 1,
                    "description": "Maximum number of lines to return (null: all)."},
            })),
        ),
        spec(
            "list_dir",
            "List a directory in the workspace, sorted by name. Directories end with `/`, \
             symlinks with `@` (not followed). `depth` 1 lists only direct entries; deeper \
             levels are shown as paths relative to the listed directory. At most 1000 \
             entries; `.git` is not descended into.",
            object(json!({
                "path": {"type": ["string", "null"], "description": "Directory, relative to the workspace root (null: the root)."},
                "depth": {"type": ["integer", "null"], "minimum": 1, "maximum": 10,
                    "description": "How many levels to descend (null: 1)."},
            })),
        ),
        spec(
            "search",
            "Search file contents with a regular expression (Rust regex syntax). Honours \
             .gitignore and .ignore files and skips hidden and binary files. Returns one \
             `path:line:text` line per match, paths relative to the workspace root, in \
             sorted directory-walk order.",
            object(json!({
                "pattern": {"type": "string", "description": "Regular expression matched against each line."},
                "path": {"type": ["string", "null"], "description": "File or directory to search (null: the workspace root)."},
                "glob": {"type": ["string", "null"], "description": "Only search files whose path matches this glob, e.g. `*.rs` or `src/**/*.ts` (null: all files)."},
                "max_results": {"type": ["integer", "null"], "minimum": 1, "maximum": 1000,
                    "description": "Stop after this many matching lines (null: 100)."},
            })),
        ),
        spec(
            "write_file",
            "Create or overwrite a file in the workspace with `content`. Missing parent \
             directories are created. The write is atomic (temp file + rename) and keeps \
             an existing file's permissions.",
            object(json!({
                "path": {"type": "string", "description": "File path, relative to the workspace root."},
                "content": {"type": "string", "description": "The complete new file content."},
            })),
        ),
        spec(
            "edit_file",
            "Replace one exact occurrence of `old` with `new` in a workspace file. `old` \
             must match exactly once (including whitespace and indentation); include more \
             surrounding text when it matches several places.",
            object(json!({
                "path": {"type": "string", "description": "File path, relative to the workspace root."},
                "old": {"type": "string", "description": "Exact text to replace; must occur exactly once."},
                "new": {"type": "string", "description": "Replacement text."},
            })),
        ),
        spec(
            "apply_patch",
            "Edit files with a patch. `input` is the whole patch: `*** Begin Patch`, then \
             per file `*** Add File: PATH` (every line of the new file prefixed with `+`), \
             `*** Delete File: PATH`, or `*** Update File: PATH` (optionally followed by \
             `*** Move to: NEW_PATH`) with chunks, each starting with `@@` (optionally \
             `@@ LINE` naming a line just above the change, such as a function header) and \
             holding lines prefixed with ` ` (context, about 3 lines around each change), \
             `-` (removed) or `+` (added); then `*** End Patch`. Paths are relative to \
             the workspace root. All or nothing: if any chunk does not match, no file \
             changes and the error names the file and the line.",
            object(json!({
                "input": {"type": "string", "description": "The entire patch, from `*** Begin Patch` to `*** End Patch`."},
            })),
        ),
        spec(
            "shell",
            "Run a command with `bash -c` in the workspace root (stdin is empty). Returns \
             stdout and stderr combined and the exit code; a nonzero exit is reported as \
             a failure with its output. The command and every process it starts are \
             killed on timeout or interrupt.",
            object(json!({
                "command": {"type": "string", "description": "Bash command line."},
                "timeout_s": {"type": ["integer", "null"], "minimum": 1, "maximum": 600,
                    "description": "Timeout in seconds (null: the session default, 120)."},
                "sandbox_grant": {
                    "type": ["object", "null"],
                    "description": "Only when a command failed on a sandbox denial and truly \
                        needs more: ask the user for a wider sandbox for this one command \
                        (null: the session's sandbox). Only honoured in `ask` permission mode.",
                    "properties": {
                        "network": {"type": ["string", "null"], "enum": ["host", null]},
                        "write": {"type": ["string", "null"], "description": "An absolute path to make writable."},
                        "read": {"type": ["string", "null"], "description": "An absolute hidden path to make readable."},
                        "cache": {"type": ["string", "null"], "enum": ["cache:cargo", "cache:npm", "cache:pip", "cache:go", null]},
                        "full_access": {"type": ["boolean", "null"]},
                        "git": {"type": ["string", "null"], "enum": ["init", null],
                            "description": "`init`: keep new git repositories this command creates even with hooks or code-running config (otherwise quarantined)."},
                        "socket": {"type": ["string", "null"],
                            "description": "An absolute path of a Unix socket (or a directory of them, such as /run/postgresql) to connect to."},
                    },
                    "required": ["network", "write", "read", "cache", "full_access", "git", "socket"],
                    "additionalProperties": false,
                },
                "justification": {"type": ["string", "null"],
                    "description": "Why the wider sandbox is needed (shown to the user)."},
            })),
        ),
        spec(
            "git_config",
            "Set a git identity key in the workspace repository's own config (what \
             `git config --local KEY VALUE` would do; git config files are read-only to \
             commands). Only user.name, user.email, author.name, author.email, \
             committer.name and committer.email; any other key is refused.",
            object(json!({
                "key": {"type": "string", "enum": crate::gitconfig::ALLOWED_KEYS},
                "value": {"type": "string", "description": "The value, such as a name or an email address."},
            })),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_are_strict_and_known() {
        let specs = specs();
        assert_eq!(specs.len(), 8);
        for s in &specs {
            assert!(is_known(&s.name));
            let p = &s.parameters;
            assert_eq!(p["additionalProperties"], false, "{}", s.name);
            let props = p["properties"].as_object().unwrap();
            let req: Vec<&str> = p["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            assert_eq!(req.len(), props.len(), "{}", s.name);
            assert!(props.keys().all(|k| req.contains(&k.as_str())));
        }
        assert!(is_known("memory_apply"));
        assert!(!is_known("rm_rf"));
        assert!(is_mutating("shell") && is_mutating("write_file") && is_mutating("edit_file"));
        assert!(is_mutating("git_config"));
        assert!(!is_mutating("read_file") && !is_mutating("list_dir") && !is_mutating("search"));
    }
}
