#!/usr/bin/env bash
# The repository's documents hold together: every Markdown link in README.md and docs/*.md
# resolves (relative paths, and #anchors to headings), README.md stays a map (at most 200 lines)
# that links every docs/*.md, every docs/NAME.md a file names exists (with the heading it cites, as
# in `docs/ssa.md "Backward"`), and no file cites a document outside the repository (the team's
# design notes or SSA specification, which users do not have: docs/design.md and docs/ssa.md are
# the repository's own). Usage: check_docs.sh [REPO_ROOT]; prints each problem, exits 1 if any.
set -uo pipefail

root="$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/../..}" && pwd)"
cd "$root" || exit 2
self="tests/docs/check_docs.sh"
readme_max_lines=200
problems=0
problem() {
  echo "check_docs: $*" >&2
  problems=$((problems + 1))
}

# Markdown text without fenced code blocks and inline code spans (links there are examples).
prose() {
  awk '/^[[:space:]]*(```|~~~)/ { fenced = !fenced; next } !fenced' "$1" | sed 's/`[^`]*`//g'
}

# GitHub's anchors of a Markdown file's headings, one per line: lower case, punctuation dropped,
# spaces made hyphens, a repeated heading numbered (-1, -2, ...).
anchors() {
  prose "$1" | LC_ALL=C awk '
    /^#+[ \t]/ {
      h = $0
      sub(/^#+[[:space:]]+/, "", h); sub(/[[:space:]]+#*[[:space:]]*$/, "", h)
      h = tolower(h); gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h)
      n = seen[h]++
      print (n ? h "-" n : h)
    }'
}

# Whether Markdown file $1 has a heading whose anchor is $2. (Whole outputs are captured before
# grep reads them: grep -q would stop early and, under pipefail, fail its writer.)
has_anchor() {
  local all
  all="$(anchors "$1")"
  grep -qxF -- "$2" <<< "$all"
}

# The files to scan for citations: tracked files, or (outside a git checkout) the project's folders
# and top-level files, never build outputs or fetched code.
tracked_files() {
  if git -C "$root" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    git -C "$root" ls-files
  else
    local folders=(.ci bench cmake configs core data docs experiments inference launcher models parallel
                   scripts ssa tests tools training)
    find . -maxdepth 1 -type f | sed 's|^\./||'
    for folder in "${folders[@]}"; do
      [[ -d "$folder" ]] && find "$folder" -type f
    done
  fi
}

# 1. Links in README.md and docs/*.md.
markdown_files=(README.md docs/*.md)
for file in "${markdown_files[@]}"; do
  [[ -f "$file" ]] || { problem "$file is missing"; continue; }
  dir="$(dirname "$file")"
  while IFS= read -r target; do
    target="${target%% *}"  # [text](path "title")
    case "$target" in
      http://* | https://* | mailto:*) continue ;;
    esac
    path="${target%%#*}"
    anchor=""
    [[ "$target" == *"#"* ]] && anchor="${target#*#}"
    if [[ -z "$path" ]]; then
      linked="$file"
    else
      linked="$dir/$path"
      if [[ ! -e "$linked" ]]; then
        problem "$file links to '$target': $path does not exist (relative to $dir/)"
        continue
      fi
    fi
    if [[ -n "$anchor" && "$linked" == *.md ]] && ! has_anchor "$linked" "$anchor"; then
      problem "$file links to '$target': $linked has no heading whose anchor is #$anchor"
    fi
  done < <(prose "$file" | grep -o '\]([^)]*)' | sed 's/^](//; s/)$//')
done

# 2. README.md is a map.
if [[ -f README.md ]]; then
  lines=$(wc -l < README.md)
  if ((lines > readme_max_lines)); then
    problem "README.md has $lines lines, more than $readme_max_lines: move the detail into docs/"
  fi
  readme_prose="$(prose README.md)"
  for doc in docs/*.md; do
    grep -qF "](${doc})" <<< "$readme_prose" || problem "README.md does not link $doc"
  done
fi

# 3. Citations of documents outside the repository, and of docs/ files or headings that do not
# exist.
outside='DESIGN\.md|SSA\.md|\.\./shared/|shared/(DESIGN|SSA|ENVIRONMENT|reviews|hooks)'
scanned() { tracked_files | grep -vxF "$self" | while IFS= read -r f; do [[ -f "$f" ]] && echo "$f"; done; }
while IFS= read -r hit; do
  problem "${hit:0:160}: cites a document outside the repository; cite docs/ instead"
done < <(scanned | xargs -d '\n' grep -HInE "$outside" --)
while IFS= read -r hit; do
  file="${hit%%:*}"
  cited="${hit#*:}"
  doc="${cited%%.md*}.md"
  heading="$(sed -n 's/^[^"]*"\(.*\)"$/\1/p' <<< "$cited")"
  if [[ ! -f "$doc" ]]; then
    problem "$file cites $doc, which does not exist"
  elif [[ -n "$heading" ]] && ! grep -qE "^#+ +${heading}[[:space:]]*$" <<< "$(prose "$doc")"; then
    problem "$file cites $doc \"$heading\", a heading $doc does not have"
  fi
done < <(scanned | xargs -d '\n' grep -HIoE '(^|[^/[A-Za-z0-9_.-])docs/[A-Za-z0-9_-]+\.md(,? "[A-Z][^"]*")?' -- |
         sed -E 's|^([^:]*):[^d]?docs/|\1:docs/|' | sort -u)

if ((problems > 0)); then
  echo "check_docs: $problems problem(s)" >&2
  exit 1
fi
echo "check_docs: README.md ($lines lines) and docs/ (${#markdown_files[@]} files) hold together"
