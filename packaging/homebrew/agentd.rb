# Homebrew formula for agentd and agentctl, built from source.
# Untested: the project has no macOS machine. Before publishing it in a tap, point
# `homepage` at the project and `url`
# at the release's source tarball and set `sha256` to that tarball's digest
# (`shasum -a 256 agentd-<version>.tar.gz`); `brew install --build-from-source` then
# builds both binaries, the man pages and the completions.
class Agentd < Formula
  desc "Daemon that keeps AI coding-agent sessions as durable, append-only Logs"
  homepage "https://example.invalid/agentd"
  url "https://example.invalid/agentd-0.1.0.tar.gz"
  sha256 "0000000000000000000000000000000000000000000000000000000000000000"
  license "MIT"

  depends_on "rust" => :build

  def install
    system "cargo", "install", "--locked", *std_cargo_args(path: "daemon")
    system "cargo", "install", "--locked", *std_cargo_args(path: "client")
    system "cargo", "run", "--locked", "--release", "-p", "xtask", "--", "dist", "--bindir", bin, "dist"
    man1.install Dir["dist/man/*.1"]
    bash_completion.install "dist/completions/agentctl.bash" => "agentctl"
    zsh_completion.install "dist/completions/_agentctl"
    fish_completion.install "dist/completions/agentctl.fish"
  end

  def caveats
    <<~EOS
      agentctl starts agentd on demand. To run it as a launchd agent instead
      (socket-activated, logs in ~/Library/Logs/agentd/):
        agentctl service install
      Provider keys for the agent go in ~/.config/agentd/env (mode 0600).
    EOS
  end

  test do
    assert_match version.to_s, shell_output("#{bin}/agentctl --version")
    assert_match version.to_s, shell_output("#{bin}/agentd --version")
    assert_match "launchctl bootstrap", shell_output("#{bin}/agentctl service install --dry-run")
  end
end
