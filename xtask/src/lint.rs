//! `cargo xtask lint`: two structural rules for the product code, checked on its syntax trees
//! (syn) rather than by counting braces:
//!
//! 1. no function over [`MAX_FN_LINES`] lines, counted from the first line of its signature
//!    (visibility included; doc comments and attributes excluded) to its closing brace: free
//!    functions, impl and trait methods, and functions nested in them;
//! 2. no import cycle between the top-level modules of one crate.
//!
//! Product code is the module tree under `src/` of the [`PRODUCT`] packages, as the compiler
//! builds it: from each crate root (`src/lib.rs`, `src/main.rs`, `src/bin/*`) through its `mod`
//! declarations, leaving out `#[cfg(test)]` items and modules. The other workspace members
//! (xtask, the test crates, ...) are checked the same way, their `tests/` files included, and
//! listed apart: they inform, they do not fail the run.
//!
//! The module graph of a crate has one node per top-level module (a directory module is one
//! node, its submodules included) and one for the crate root itself, named after its file. An
//! edge A -> B is a path in A's code that names B: `crate::B::..`, `super::..` resolved to B, or
//! in the root a path starting with `B::`. A name the root only re-exports (`pub use b::Thing`)
//! leads to the module it comes from (b), not to the root. Each strongly connected component of
//! more than one node is reported, with a shortest cycle through its first node and where
//! each of that cycle's edges comes from.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    fmt::Write as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};
use proc_macro2::{Span, TokenStream, TokenTree};
use syn::{
    Attribute, Item, UseTree,
    spanned::Spanned as _,
    visit::{self, Visit},
};

/// The longest a function may be, in lines.
pub const MAX_FN_LINES: usize = 120;

/// The packages whose `src/` is product code (the rules fail the run there).
const PRODUCT: &[&str] = &[
    "mc-common",
    "mc-api",
    "mc-kube",
    "mc-controller",
    "mc-agent",
    "mc-ebpf",
    "mcctl",
];

/// Runs both checks over the workspace and prints one line per violation; an error (exit status
/// 1) when product code has any.
pub fn run() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("xtask's directory has no parent")?
        .to_owned();
    let members = workspace_members(&root)?;
    let mut product = Vec::new();
    let mut other = Vec::new();
    for m in &members {
        let is_product = PRODUCT.contains(&m.as_str());
        let found = check_package(&root, m, !is_product)?;
        if is_product {
            product.extend(found);
        } else {
            other.extend(found);
        }
    }
    for v in &product {
        println!("{v}");
    }
    if !other.is_empty() {
        println!("informational (xtask and test code; does not fail):");
        for v in &other {
            println!("  {v}");
        }
    }
    if !product.is_empty() {
        bail!(
            "{} violation(s) in product code (functions over {MAX_FN_LINES} lines, module cycles)",
            product.len()
        );
    }
    println!("lint: product code is clean");
    Ok(())
}

/// The `members` of the workspace's Cargo.toml (a flat list of quoted paths).
fn workspace_members(root: &Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(root.join("Cargo.toml")).context("reading Cargo.toml")?;
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .context("no members in the workspace's Cargo.toml")?;
    Ok(line
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect())
}

/// The violations of one package: each crate root under `src/` (and, with `with_tests`, each
/// integration test under `tests/`) with the modules it declares.
fn check_package(root: &Path, package: &str, with_tests: bool) -> anyhow::Result<Vec<String>> {
    let dir = root.join(package);
    let mut roots = Vec::new();
    for name in ["src/lib.rs", "src/main.rs"] {
        if dir.join(name).is_file() {
            roots.push(dir.join(name));
        }
    }
    roots.extend(rs_files_in(&dir.join("src/bin")));
    if with_tests {
        roots.extend(rs_files_in(&dir.join("tests")));
    }
    let mut out: Vec<String> = Vec::new();
    for crate_root in roots {
        let files = load_crate(&crate_root)?;
        let rel = |p: &Path| p.strip_prefix(root).unwrap_or(p).display().to_string();
        for f in &files {
            for l in fn_lengths(&f.syntax) {
                if l.lines > MAX_FN_LINES {
                    // A file two crate roots declare is reported once.
                    push_new(
                        &mut out,
                        format!(
                            "{}:{} fn {}: {} lines",
                            rel(&f.path),
                            l.line,
                            l.name,
                            l.lines
                        ),
                    );
                }
            }
        }
        let label = crate_label(package, &dir, &crate_root);
        let graph = module_graph(&files);
        for cycle in graph.cycles() {
            out.push(format!("{label}: {}", graph.describe(&cycle, &rel)));
        }
    }
    Ok(out)
}

fn push_new(out: &mut Vec<String>, line: String) {
    if !out.contains(&line) {
        out.push(line);
    }
}

/// A crate's name in the report: the package, with the binary's name for `src/bin` roots and
/// the test's for `tests/` roots.
fn crate_label(package: &str, dir: &Path, crate_root: &Path) -> String {
    let rel = crate_root.strip_prefix(dir).unwrap_or(crate_root);
    match rel.iter().next().and_then(|c| c.to_str()) {
        Some("src") if rel.parent() == Some(Path::new("src")) => package.to_owned(),
        _ => {
            let name = if rel.file_name().is_some_and(|n| n == "main.rs") {
                rel.parent().and_then(Path::file_name)
            } else {
                rel.file_stem()
            };
            let kind = if rel.starts_with("tests") {
                "test"
            } else {
                "bin"
            };
            let name = name.map(|n| n.to_string_lossy()).unwrap_or_default();
            format!("{package} ({kind} {name})")
        }
    }
}

/// The crate roots in a directory: `*.rs`, and `*/main.rs` (sorted).
fn rs_files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| {
            if p.is_dir() {
                Some(p.join("main.rs")).filter(|m| m.is_file())
            } else {
                p.extension().is_some_and(|e| e == "rs").then_some(p)
            }
        })
        .collect();
    out.sort();
    out
}

/// One source file of a crate.
struct SourceFile {
    path: PathBuf,
    /// Its module's path in the crate (empty for the crate root).
    module: Vec<String>,
    syntax: syn::File,
}

/// Whether the attributes say `#[cfg(test)]` (or a `cfg(all(test, ..))`): code the product
/// never builds.
fn is_test_only(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && {
            let text = a
                .meta
                .require_list()
                .map(|l| l.tokens.to_string())
                .unwrap_or_default();
            text == "test" || text.starts_with("all (test")
        }
    })
}

/// The value of a `#[path = "..."]` attribute.
fn path_attr(attrs: &[Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| {
        let nv = a.meta.require_name_value().ok()?;
        if !nv.path.is_ident("path") {
            return None;
        }
        match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        }
    })
}

/// The files of the crate rooted at `root`, following its `mod name;` declarations (not those
/// under `#[cfg(test)]`).
fn load_crate(root: &Path) -> anyhow::Result<Vec<SourceFile>> {
    let mut files = Vec::new();
    let dir = root.parent().unwrap_or(Path::new(".")).to_owned();
    load_file(root, Vec::new(), dir, &mut files)?;
    Ok(files)
}

/// Loads `path` (module `module`, whose child modules live in `child_dir`) and the files of the
/// modules it declares.
fn load_file(
    path: &Path,
    module: Vec<String>,
    child_dir: PathBuf,
    files: &mut Vec<SourceFile>,
) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let syntax =
        syn::parse_file(&text).with_context(|| format!("cannot parse {}", path.display()))?;
    let mut declared = Vec::new();
    declared_files(&syntax.items, &module, &child_dir, &mut declared);
    files.push(SourceFile {
        path: path.to_owned(),
        module,
        syntax,
    });
    for (file, module, child_dir) in declared {
        load_file(&file, module, child_dir, files)?;
    }
    Ok(())
}

/// The `mod name;` declarations among `items` (recursing into inline modules): each module's
/// file, module path and the directory of its own children.
fn declared_files(
    items: &[Item],
    module: &[String],
    dir: &Path,
    out: &mut Vec<(PathBuf, Vec<String>, PathBuf)>,
) {
    for item in items {
        let Item::Mod(m) = item else { continue };
        if is_test_only(&m.attrs) {
            continue;
        }
        let name = m.ident.to_string();
        let mut child = module.to_vec();
        child.push(name.clone());
        match &m.content {
            Some((_, inner)) => declared_files(inner, &child, &dir.join(&name), out),
            None => {
                let (file, child_dir) = match path_attr(&m.attrs) {
                    Some(p) => {
                        let file = dir.join(p);
                        let child_dir = file.with_extension("");
                        (file, child_dir)
                    }
                    None if dir.join(format!("{name}.rs")).is_file() => {
                        (dir.join(format!("{name}.rs")), dir.join(&name))
                    }
                    None => (dir.join(&name).join("mod.rs"), dir.join(&name)),
                };
                out.push((file, child, child_dir));
            }
        }
    }
}

/// A function's length.
#[derive(Debug, PartialEq, Eq)]
pub struct FnLength {
    /// `name`, or `Type::name` for a method.
    pub name: String,
    /// The line its signature starts on.
    pub line: usize,
    pub lines: usize,
}

/// The length of every function in `file` outside `#[cfg(test)]` code.
pub fn fn_lengths(file: &syn::File) -> Vec<FnLength> {
    let mut v = FnVisitor::default();
    v.visit_file(file);
    v.out
}

#[derive(Default)]
struct FnVisitor {
    /// The type (or trait) of the impl or trait being visited, for method names.
    owner: Vec<String>,
    out: Vec<FnLength>,
}

impl FnVisitor {
    fn record(&mut self, name: &syn::Ident, start: Span, close: Span) {
        let name = match self.owner.last() {
            Some(owner) => format!("{owner}::{name}"),
            None => name.to_string(),
        };
        let (line, end) = (start.start().line, close.end().line);
        self.out.push(FnLength {
            name,
            line,
            lines: end + 1 - line,
        });
    }
}

/// Where a function's signature starts: its visibility when it has one, else the signature.
fn signature_start(vis: &syn::Visibility, sig: &syn::Signature) -> Span {
    match vis {
        syn::Visibility::Inherited => sig.span(),
        v => v.span(),
    }
}

/// The last segment's name of a type (`Foo` for `crate::a::Foo<T>` and `&Foo`), else `_`.
fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default(),
        syn::Type::Reference(r) => type_name(&r.elem),
        _ => "_".to_owned(),
    }
}

impl<'ast> Visit<'ast> for FnVisitor {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test_only(&m.attrs) {
            visit::visit_item_mod(self, m);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if is_test_only(&f.attrs) {
            return;
        }
        let start = signature_start(&f.vis, &f.sig);
        self.record(&f.sig.ident, start, f.block.brace_token.span.close());
        // A nested fn is a function of its own, not a method of the enclosing impl.
        let owner = std::mem::take(&mut self.owner);
        visit::visit_item_fn(self, f);
        self.owner = owner;
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if is_test_only(&i.attrs) {
            return;
        }
        self.owner.push(type_name(&i.self_ty));
        visit::visit_item_impl(self, i);
        self.owner.pop();
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if is_test_only(&f.attrs) {
            return;
        }
        let start = signature_start(&f.vis, &f.sig);
        self.record(&f.sig.ident, start, f.block.brace_token.span.close());
        let owner = std::mem::take(&mut self.owner);
        visit::visit_impl_item_fn(self, f);
        self.owner = owner;
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        if is_test_only(&t.attrs) {
            return;
        }
        self.owner.push(t.ident.to_string());
        visit::visit_item_trait(self, t);
        self.owner.pop();
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if is_test_only(&f.attrs) {
            return;
        }
        if let Some(block) = &f.default {
            self.record(&f.sig.ident, f.sig.span(), block.brace_token.span.close());
        }
        let owner = std::mem::take(&mut self.owner);
        visit::visit_trait_item_fn(self, f);
        self.owner = owner;
    }
}

/// Where an edge of the module graph comes from: the first path that makes it.
#[derive(Clone, Debug)]
struct Evidence {
    file: PathBuf,
    line: usize,
    path: String,
}

/// The module graph of one crate.
struct ModuleGraph {
    /// The crate root's node name (its file's stem: `lib`, `main`, ...).
    root: String,
    nodes: BTreeSet<String>,
    edges: BTreeMap<String, BTreeMap<String, Evidence>>,
}

/// The module graph of a crate's files (the root file first).
fn module_graph(files: &[SourceFile]) -> ModuleGraph {
    let root_file = files.iter().find(|f| f.module.is_empty());
    let root = root_file
        .and_then(|f| f.path.file_stem())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "crate".into());
    let root_items = root_file.map(|f| f.syntax.items.as_slice()).unwrap_or(&[]);
    let top: BTreeSet<String> = root_items
        .iter()
        .filter_map(|i| match i {
            Item::Mod(m) if !is_test_only(&m.attrs) => Some(m.ident.to_string()),
            _ => None,
        })
        .collect();
    let reexports = reexports(root_items, &top);
    let mut nodes = top.clone();
    nodes.insert(root.clone());
    let mut graph = ModuleGraph {
        root,
        nodes,
        edges: BTreeMap::new(),
    };
    for f in files {
        let mut v = PathVisitor {
            module: f.module.clone(),
            paths: Vec::new(),
        };
        v.visit_file(&f.syntax);
        let from = f.module.first().unwrap_or(&graph.root).clone();
        for (module, path, span) in v.paths {
            let Some(to) = resolve(&module, &path, &top, &reexports, &graph.root) else {
                continue;
            };
            if to == from {
                continue;
            }
            graph
                .edges
                .entry(from.clone())
                .or_default()
                .entry(to)
                .or_insert_with(|| Evidence {
                    file: f.path.clone(),
                    line: span.start().line,
                    path: path.join("::"),
                });
        }
    }
    graph
}

/// The names the crate root imports from its top-level modules (`use a::Thing` / `pub use
/// a::{b::Other, Third as T}`), with the module each comes from.
fn reexports(root_items: &[Item], top: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for item in root_items {
        let Item::Use(u) = item else { continue };
        if is_test_only(&u.attrs) {
            continue;
        }
        for path in use_paths(&u.tree) {
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            let path = match path.as_slice() {
                ["crate" | "self", rest @ ..] => rest,
                p => p,
            };
            if let [first, .., last] = path
                && top.contains(*first)
            {
                out.insert((*last).to_owned(), (*first).to_owned());
            }
        }
    }
    out
}

/// The paths a use tree imports, one per leaf (a rename's leaf is the new name; a glob's is
/// `*`).
fn use_paths(tree: &UseTree) -> Vec<Vec<String>> {
    match tree {
        UseTree::Path(p) => use_paths(&p.tree)
            .into_iter()
            .map(|mut rest| {
                rest.insert(0, p.ident.to_string());
                rest
            })
            .collect(),
        UseTree::Name(n) => vec![vec![n.ident.to_string()]],
        UseTree::Rename(r) => vec![vec![r.rename.to_string()]],
        UseTree::Glob(_) => vec![vec!["*".to_owned()]],
        UseTree::Group(g) => g.items.iter().flat_map(use_paths).collect(),
    }
}

/// The node a path in module `module` leads to, if it leads into the crate.
fn resolve(
    module: &[String],
    path: &[String],
    top: &BTreeSet<String>,
    reexports: &BTreeMap<String, String>,
    root: &str,
) -> Option<String> {
    let absolute: Vec<&str> = match path.first().map(String::as_str) {
        Some("crate") => path[1..].iter().map(String::as_str).collect(),
        Some("self") => module
            .iter()
            .chain(&path[1..])
            .map(String::as_str)
            .collect(),
        Some("super") => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let base = module.len().checked_sub(ups)?;
            module[..base]
                .iter()
                .chain(&path[ups..])
                .map(String::as_str)
                .collect()
        }
        // In the root, a path may start with a top-level module's name; elsewhere a bare path
        // names the module's own items, its children or another crate.
        Some(first) if module.is_empty() && top.contains(first) => {
            path.iter().map(String::as_str).collect()
        }
        _ => return None,
    };
    match absolute.as_slice() {
        [] => Some(root.to_owned()),
        [first, ..] if top.contains(*first) => Some((*first).to_owned()),
        // `crate::Thing` where the root re-exports Thing from a module: that module.
        [first, ..] => Some(
            reexports
                .get(*first)
                .map_or(root, String::as_str)
                .to_owned(),
        ),
    }
}

/// Collects the crate-relative paths (`crate::`, `self::`, `super::`, and in the root every
/// path) of a file outside `#[cfg(test)]` code, with the module each is in and where.
struct PathVisitor {
    module: Vec<String>,
    paths: Vec<(Vec<String>, Vec<String>, Span)>,
}

impl PathVisitor {
    fn push(&mut self, path: Vec<String>, span: Span) {
        self.paths.push((self.module.clone(), path, span));
    }

    /// Paths inside a macro's tokens (`format!`, `json!`, ...): `crate :: a`, `super :: a`,
    /// `self :: a` sequences, and `a :: b` in the root.
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => self.scan_tokens(g.stream()),
                TokenTree::Ident(id) => {
                    let starts = i == 0 || !is_colon(&tokens[i - 1]);
                    let mut path = vec![id.to_string()];
                    let mut j = i + 1;
                    while j + 2 < tokens.len() && is_colon(&tokens[j]) && is_colon(&tokens[j + 1]) {
                        let Some(TokenTree::Ident(next)) = tokens.get(j + 2) else {
                            break;
                        };
                        path.push(next.to_string());
                        j += 3;
                    }
                    if starts && path.len() > 1 {
                        self.push(path, id.span());
                    }
                    i = j.max(i + 1);
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

fn is_colon(t: &TokenTree) -> bool {
    matches!(t, TokenTree::Punct(p) if p.as_char() == ':')
}

impl<'ast> Visit<'ast> for PathVisitor {
    fn visit_item(&mut self, item: &'ast Item) {
        let attrs = match item {
            Item::Fn(i) => &i.attrs,
            Item::Impl(i) => &i.attrs,
            Item::Mod(i) => &i.attrs,
            Item::Use(i) => &i.attrs,
            Item::Struct(i) => &i.attrs,
            Item::Enum(i) => &i.attrs,
            Item::Const(i) => &i.attrs,
            Item::Static(i) => &i.attrs,
            Item::Trait(i) => &i.attrs,
            Item::Type(i) => &i.attrs,
            Item::Macro(i) => &i.attrs,
            _ => return visit::visit_item(self, item),
        };
        if !is_test_only(attrs) {
            visit::visit_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        // `mod a;` declares a module; it does not use it.
        if m.content.is_some() {
            self.module.push(m.ident.to_string());
            visit::visit_item_mod(self, m);
            self.module.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let span = u.tree.span();
        for path in use_paths(&u.tree) {
            self.push(path, span);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() && p.segments.len() > 1 {
            let path = p.segments.iter().map(|s| s.ident.to_string()).collect();
            self.push(path, p.span());
        }
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.scan_tokens(m.tokens.clone());
        visit::visit_macro(self, m);
    }
}

impl ModuleGraph {
    /// The strongly connected components of more than one node (Tarjan's algorithm), each
    /// sorted, in the order of their first node.
    fn cycles(&self) -> Vec<Vec<String>> {
        let mut t = Tarjan {
            graph: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            next: 0,
            out: Vec::new(),
        };
        for n in &self.nodes {
            if !t.index.contains_key(n) {
                t.connect(n);
            }
        }
        let mut out: Vec<Vec<String>> = t.out.into_iter().filter(|c| c.len() > 1).collect();
        for c in &mut out {
            c.sort();
        }
        out.sort();
        out
    }

    fn successors(&self, n: &str) -> impl Iterator<Item = &String> {
        self.edges.get(n).into_iter().flat_map(|m| m.keys())
    }

    /// A shortest cycle through the component's first node, within the component.
    fn shortest_cycle(&self, component: &[String]) -> Vec<String> {
        let start = &component[0];
        let mut parent: BTreeMap<&String, &String> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(n) = queue.pop_front() {
            for s in self.successors(n) {
                if !component.contains(s) {
                    continue;
                }
                if s == start {
                    let mut path = vec![n.clone()];
                    let mut at = n;
                    while at != start {
                        at = parent[at];
                        path.push(at.clone());
                    }
                    path.reverse();
                    path.push(start.clone());
                    return path;
                }
                if s != start && !parent.contains_key(s) {
                    parent.insert(s, n);
                    queue.push_back(s);
                }
            }
        }
        component.to_vec()
    }

    /// `cycle a -> b -> a (a.rs:3 crate::b::x; b.rs:9 crate::a::y)`, and the component's other
    /// nodes when the cycle does not pass through them all.
    fn describe(&self, component: &[String], rel: &dyn Fn(&Path) -> String) -> String {
        let cycle = self.shortest_cycle(component);
        let mut s = format!("cycle {}", cycle.join(" -> "));
        let evidence: Vec<String> = cycle
            .windows(2)
            .filter_map(|w| self.edges.get(&w[0])?.get(&w[1]))
            .map(|e| format!("{}:{} {}", rel(&e.file), e.line, e.path))
            .collect();
        let _ = write!(s, " ({})", evidence.join("; "));
        if component.len() + 1 > cycle.len() {
            let _ = write!(s, "; the same knot: {}", component.join(", "));
        }
        s
    }
}

struct Tarjan<'g> {
    graph: &'g ModuleGraph,
    index: BTreeMap<&'g String, usize>,
    low: BTreeMap<&'g String, usize>,
    stack: Vec<&'g String>,
    on_stack: BTreeSet<&'g String>,
    next: usize,
    out: Vec<Vec<String>>,
}

impl<'g> Tarjan<'g> {
    fn connect(&mut self, n: &'g String) {
        self.index.insert(n, self.next);
        self.low.insert(n, self.next);
        self.next += 1;
        self.stack.push(n);
        self.on_stack.insert(n);
        let successors: Vec<&'g String> = self.graph.successors(n).collect();
        for s in successors {
            if !self.index.contains_key(s) {
                self.connect(s);
                let low = self.low[n].min(self.low[s]);
                self.low.insert(n, low);
            } else if self.on_stack.contains(s) {
                let low = self.low[n].min(self.index[s]);
                self.low.insert(n, low);
            }
        }
        if self.low[n] == self.index[n] {
            let mut component = Vec::new();
            while let Some(m) = self.stack.pop() {
                self.on_stack.remove(m);
                component.push(m.clone());
                if m == n {
                    break;
                }
            }
            self.out.push(component);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lengths(src: &str) -> Vec<(String, usize, usize)> {
        fn_lengths(&syn::parse_file(src).unwrap())
            .into_iter()
            .map(|l| (l.name, l.line, l.lines))
            .collect()
    }

    #[test]
    fn lint_counts_from_signature_to_closing_brace() {
        let src = "\
/// Doc comments and attributes do not count.
#[inline]
pub fn free(
    a: u8,
) -> u8 {
    a
}
struct S;
impl S {
    async fn method(&self) {
        fn nested() {}
    }
}
trait T {
    fn required(&self);
    fn provided(&self) {
    }
}
#[cfg(test)]
mod tests {
    fn skipped() {}
}
#[cfg(test)]
fn skipped_too() {}
";
        assert_eq!(
            lengths(src),
            [
                ("free".to_owned(), 3, 5),
                ("S::method".to_owned(), 10, 3),
                ("nested".to_owned(), 11, 1),
                ("T::provided".to_owned(), 16, 2),
            ]
        );
    }

    fn file(module: &[&str], src: &str) -> SourceFile {
        let name = module.last().copied().unwrap_or("main");
        SourceFile {
            path: PathBuf::from(format!("{name}.rs")),
            module: module.iter().map(|s| (*s).to_owned()).collect(),
            syntax: syn::parse_file(src).unwrap(),
        }
    }

    fn cycles(files: &[SourceFile]) -> Vec<String> {
        let g = module_graph(files);
        g.cycles()
            .iter()
            .map(|c| g.shortest_cycle(c).join(" -> "))
            .collect()
    }

    #[test]
    fn lint_finds_a_cycle_through_the_root() {
        // member uses an item the root defines; the root uses member.
        let files = [
            file(
                &[],
                "mod member; struct Cluster; fn f() { member::load(); }",
            ),
            file(&["member"], "use crate::Cluster; pub fn load() {}"),
        ];
        assert_eq!(cycles(&files), ["main -> member -> main"]);
    }

    #[test]
    fn lint_resolves_super_and_reexports() {
        let files = [
            file(&[], "mod a; mod b; mod c; pub use a::Thing;"),
            // crate::Thing is a's (re-exported), not the root's: no cycle through the root.
            file(&["b"], "fn f() -> crate::Thing { todo!() }"),
            // An inline module's super::super is the root: c -> b.
            file(&["c"], "mod inner { fn g() { super::super::b::f(); } }"),
            file(&["a"], "pub struct Thing;"),
        ];
        assert!(cycles(&files).is_empty());
        let mut files = files;
        files[3] = file(
            &["a"],
            "pub struct Thing; fn h() { println!(\"{}\", crate::c::X); }",
        );
        files[2] = file(&["c"], "const X: u8 = 0; fn g() { super::b::f(); }");
        files[1] = file(&["b"], "use crate::Thing; fn f() {}");
        // a -> c (in a macro), c -> b, b -> a (through the re-export).
        assert_eq!(cycles(&files), ["a -> c -> b -> a"]);
    }

    #[test]
    fn lint_ignores_test_code_and_declarations() {
        let files = [
            file(&[], "mod a; mod b;"),
            file(&["a"], "#[cfg(test)] mod tests { use crate::b::x; }"),
            file(&["b"], "use crate::a::y;"),
        ];
        assert!(cycles(&files).is_empty());
    }

    #[test]
    fn lint_reports_a_component_once() {
        let files = [
            file(&[], "mod a; mod b; mod c;"),
            file(&["a"], "use crate::b::x; use crate::c::y;"),
            file(&["b"], "use crate::a::x;"),
            file(&["c"], "use super::a::x;"),
        ];
        let g = module_graph(&files);
        assert_eq!(g.cycles(), [vec!["a", "b", "c"]]);
        assert_eq!(
            g.describe(&g.cycles()[0], &|p| p.display().to_string()),
            "cycle a -> b -> a (a.rs:1 crate::b::x; b.rs:1 crate::a::x); the same knot: a, b, c"
        );
    }
}
