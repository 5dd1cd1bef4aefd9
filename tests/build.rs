//! `test-agent` is the client exactly as `agent` runs it, so it is linked
//! with the same start-up layout (see `client-cli/link/order.rs`).

#[path = "../client-cli/link/order.rs"]
mod order;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../client-cli/link/order.rs");
    for arg in order::startup_order_args(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../client-cli/link/startup-symbols.txt"),
    ) {
        println!("cargo:rustc-link-arg-bin=test-agent={arg}");
    }
}
