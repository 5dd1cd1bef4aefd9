//! Lays out the `agent` binary's start-up code together (see `link/order.rs`).

#[path = "link/order.rs"]
mod order;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=link/order.rs");
    for arg in order::startup_order_args(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("link/startup-symbols.txt"),
    ) {
        println!("cargo:rustc-link-arg-bins={arg}");
    }
}
