//! One source file's shape, read with `syn`: how many of its lines are not
//! test code, how long each function is, which other modules of its crate it
//! names, and which of its `mod x;` declarations are test modules (their
//! files are test code too).
//!
//! Test code is anything under an attribute that only compiles it for tests:
//! `#[cfg(test)]`, `#[cfg(all(test, …))]`, `#[test]`, `#[tokio::test]`.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::spanned::Spanned;
use syn::visit::{self, Visit};
use syn::{Attribute, Item, Meta, Token, UseTree, punctuated::Punctuated};

/// What [`scan`] measured in one file.
#[derive(Debug, Default)]
pub(crate) struct FileShape {
    /// Every line of the file.
    pub lines: usize,
    /// Lines outside test items.
    pub non_test_lines: usize,
    /// Every function with a body outside test items, nested ones included.
    pub fns: Vec<FnShape>,
    /// Paths that start with `crate::`, `self::` or `super::`, resolved.
    pub refs: Vec<ModRef>,
    /// Module paths (from the crate root) of `#[cfg(test)] mod x;`.
    pub test_mods: Vec<Vec<String>>,
    /// Calls that start a task by tokio's own functions (`tokio::spawn`,
    /// `tokio::task::spawn_blocking`, `handle.spawn_blocking(…)`), by
    /// line and path.
    pub spawns: Vec<(usize, String)>,
}

/// A function: its name inside the file (`Type::method`, `outer::inner`),
/// the line of its signature and its length from there to its closing brace.
#[derive(Debug)]
pub(crate) struct FnShape {
    pub name: String,
    pub line: usize,
    pub lines: usize,
}

/// A path naming a module of the same crate.
#[derive(Debug)]
pub(crate) struct ModRef {
    pub line: usize,
    /// The top module it lands in (`llm` for `crate::llm::Provider`).
    pub top: String,
    /// The path as written.
    pub path: String,
}

/// Measures `text`, the file of module `module` (its path from the crate
/// root: `["store", "journal"]` for `src/store/journal.rs`).
pub(crate) fn scan(text: &str, module: &[String]) -> syn::Result<FileShape> {
    let file = syn::parse_file(text)?;
    let mut scan = Scan {
        module: module.to_vec(),
        names: Vec::new(),
        test_lines: Vec::new(),
        shape: FileShape::default(),
    };
    scan.visit_file(&file);
    let mut shape = scan.shape;
    shape.lines = text.lines().count();
    shape.non_test_lines = shape.lines - covered(scan.test_lines);
    Ok(shape)
}

/// How many lines the (possibly overlapping) ranges cover.
fn covered(mut ranges: Vec<(usize, usize)>) -> usize {
    ranges.sort_unstable();
    let mut total = 0;
    let mut upto = 0;
    for (start, end) in ranges {
        let start = start.max(upto + 1);
        if end >= start {
            total += end - start + 1;
            upto = end;
        }
    }
    total
}

/// tokio's functions that start a task.
const SPAWNERS: [&str; 3] = ["spawn", "spawn_blocking", "spawn_local"];

fn line(span: Span) -> usize {
    span.start().line
}

fn end_line(span: Span) -> usize {
    span.end().line
}

/// Whether the attributes make their item test-only.
pub(crate) fn is_test(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let path = attr.path();
        if path.segments.last().is_some_and(|s| s.ident == "test") {
            return true;
        }
        path.is_ident("cfg")
            && attr
                .parse_args::<Meta>()
                .is_ok_and(|meta| requires_test(&meta))
    })
}

/// Whether a `cfg` predicate can only hold in a test build.
fn requires_test(meta: &Meta) -> bool {
    match meta {
        Meta::Path(path) => path.is_ident("test"),
        Meta::List(list) if list.path.is_ident("all") => list
            .parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
            .is_ok_and(|all| all.iter().any(requires_test)),
        _ => false,
    }
}

fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

struct Scan {
    /// The module being read, from the crate root (inline `mod`s pushed).
    module: Vec<String>,
    /// Inline modules, types and functions around the current point.
    names: Vec<String>,
    test_lines: Vec<(usize, usize)>,
    shape: FileShape,
}

impl Scan {
    /// Records a test node's lines; true when the node is test code (and
    /// so must not be walked).
    fn skip_test(&mut self, attrs: &[Attribute], node: &impl Spanned) -> bool {
        if !is_test(attrs) {
            return false;
        }
        let span = node.span();
        self.test_lines.push((line(span), end_line(span)));
        true
    }

    /// Records a function from its signature (or visibility) to its body's
    /// closing brace, then walks its body with its name pushed.
    fn function(&mut self, ident: &syn::Ident, start: Span, block: &syn::Block) {
        let first = line(start);
        let last = end_line(block.brace_token.span.close());
        self.names.push(ident.to_string());
        self.shape.fns.push(FnShape {
            name: self.names.join("::"),
            line: first,
            lines: last + 1 - first,
        });
        self.visit_block(block);
        self.names.pop();
    }

    /// Resolves `crate::`, `self::` and `super::` paths to the top module
    /// they land in; other paths (external crates, names in scope) are not
    /// followed.
    fn reference(&mut self, segments: &[String], at: Span) {
        let Some(first) = segments.first() else {
            return;
        };
        let mut resolved = match first.as_str() {
            "crate" => Vec::new(),
            "self" => self.module.clone(),
            "super" => self.module.clone(),
            _ => return,
        };
        let mut rest = &segments[1..];
        if first == "super" {
            resolved.pop();
            while rest.first().is_some_and(|s| s == "super") {
                resolved.pop();
                rest = &rest[1..];
            }
        }
        resolved.extend(rest.iter().cloned());
        let Some(top) = resolved.first().filter(|top| *top != "*" && *top != "self") else {
            return;
        };
        self.shape.refs.push(ModRef {
            line: line(at),
            top: top.clone(),
            path: segments.join("::"),
        });
    }

    /// Records `segments` when it names one of tokio's task spawners.
    fn spawner(&mut self, segments: &[String], at: Span) {
        if segments.first().is_some_and(|s| s == "tokio")
            && segments
                .last()
                .is_some_and(|s| SPAWNERS.contains(&s.as_str()))
        {
            self.shape.spawns.push((line(at), segments.join("::")));
        }
    }

    fn macro_paths(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let colon =
            |t: Option<&TokenTree>| matches!(t, Some(TokenTree::Punct(p)) if p.as_char() == ':');
        for (i, token) in tokens.iter().enumerate() {
            match token {
                TokenTree::Group(g) => self.macro_paths(g.stream()),
                TokenTree::Ident(first)
                    if (first == "crate"
                        || first == "self"
                        || first == "super"
                        || first == "tokio")
                        && !colon(i.checked_sub(1).and_then(|p| tokens.get(p))) =>
                {
                    let mut segments = vec![first.to_string()];
                    let mut j = i + 1;
                    while colon(tokens.get(j)) && colon(tokens.get(j + 1)) {
                        let Some(TokenTree::Ident(next)) = tokens.get(j + 2) else {
                            break;
                        };
                        segments.push(next.to_string());
                        j += 3;
                    }
                    if segments.len() > 1 {
                        self.reference(&segments, first.span());
                        self.spawner(&segments, first.span());
                    }
                }
                _ => {}
            }
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &UseTree) {
        match tree {
            UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            UseTree::Name(n) => self.use_leaf(prefix, n.ident.to_string(), n.ident.span()),
            UseTree::Rename(r) => self.use_leaf(prefix, r.ident.to_string(), r.ident.span()),
            UseTree::Glob(g) => self.use_leaf(prefix, "*".to_string(), g.star_token.span),
            UseTree::Group(g) => g.items.iter().for_each(|t| self.use_tree(prefix, t)),
        }
    }

    fn use_leaf(&mut self, prefix: &[String], last: String, at: Span) {
        let mut path = prefix.to_vec();
        path.push(last);
        self.reference(&path, at);
        self.spawner(&path, at);
    }
}

impl<'ast> Visit<'ast> for Scan {
    fn visit_item(&mut self, item: &'ast Item) {
        if !self.skip_test(item_attrs(item), item) {
            return visit::visit_item(self, item);
        }
        if let Item::Mod(m) = item
            && m.content.is_none()
        {
            let mut path = self.module.clone();
            path.push(m.ident.to_string());
            self.shape.test_mods.push(path);
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs: &[Attribute] = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => &[],
        };
        if !self.skip_test(attrs, item) {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_trait_item(&mut self, item: &'ast syn::TraitItem) {
        let attrs: &[Attribute] = match item {
            syn::TraitItem::Const(i) => &i.attrs,
            syn::TraitItem::Fn(i) => &i.attrs,
            syn::TraitItem::Type(i) => &i.attrs,
            syn::TraitItem::Macro(i) => &i.attrs,
            _ => &[],
        };
        if !self.skip_test(attrs, item) {
            visit::visit_trait_item(self, item);
        }
    }

    fn visit_field(&mut self, field: &'ast syn::Field) {
        if !self.skip_test(&field.attrs, field) {
            visit::visit_field(self, field);
        }
    }

    fn visit_field_value(&mut self, field: &'ast syn::FieldValue) {
        if !self.skip_test(&field.attrs, field) {
            visit::visit_field_value(self, field);
        }
    }

    fn visit_variant(&mut self, variant: &'ast syn::Variant) {
        if !self.skip_test(&variant.attrs, variant) {
            visit::visit_variant(self, variant);
        }
    }

    fn visit_local(&mut self, local: &'ast syn::Local) {
        if !self.skip_test(&local.attrs, local) {
            visit::visit_local(self, local);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        // `mod x;` is its own file, measured on its own.
        if m.content.is_none() {
            return;
        }
        self.module.push(m.ident.to_string());
        self.names.push(m.ident.to_string());
        visit::visit_item_mod(self, m);
        self.names.pop();
        self.module.pop();
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        let name = match &*i.self_ty {
            syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
            _ => None,
        };
        self.names.push(name.unwrap_or_else(|| "impl".to_string()));
        visit::visit_item_impl(self, i);
        self.names.pop();
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        self.names.push(t.ident.to_string());
        visit::visit_item_trait(self, t);
        self.names.pop();
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        let start = match f.vis {
            syn::Visibility::Inherited => f.sig.span(),
            _ => f.vis.span(),
        };
        self.visit_signature(&f.sig);
        self.function(&f.sig.ident, start, &f.block);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        let start = match f.vis {
            syn::Visibility::Inherited => f.sig.span(),
            _ => f.vis.span(),
        };
        self.visit_signature(&f.sig);
        self.function(&f.sig.ident, start, &f.block);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        self.visit_signature(&f.sig);
        if let Some(block) = &f.default {
            self.function(&f.sig.ident, f.sig.span(), block);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    /// A macro's arguments are tokens to `syn`; its `crate::`, `self::` and
    /// `super::` paths are found in them by hand (`format!("{}",
    /// crate::grpc::brief(id))` names `grpc` all the same).
    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.macro_paths(mac.tokens.clone());
        visit::visit_macro(self, mac);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments.len() > 1 {
            self.reference(&segments, path.span());
            self.spawner(&segments, path.span());
        }
        visit::visit_path(self, path);
    }

    /// `handle.spawn_blocking(…)` on a runtime handle (a `.spawn(…)` may be
    /// a process's, so only the blocking and local forms are told apart).
    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        if call.method == "spawn_blocking" || call.method == "spawn_local" {
            self.shape
                .spawns
                .push((line(call.method.span()), format!(".{}", call.method)));
        }
        visit::visit_expr_method_call(self, call);
    }
}
