//! The deterministic engine of gpuclaim: the API types and keys, the compact model the rules decide on, the
//! admission rules, and the edge that turns Kubernetes objects and AdmissionReviews into and out of them.
//!
//! No I/O, no clock, no randomness, no threads: the caller passes the view (and, for the controller, the time).
//! The same view gives the same decision, byte for byte, in the twin and live.
//!
//! ```
//! use gpuclaim_engine::{model::View, objects::load_objects, review::answer_review};
//!
//! let objects = load_objects(r#"
//! apiVersion: gpu.cozystack.io/v1alpha1
//! kind: GPUClass
//! metadata: {name: h100}
//! spec: {resourceName: nvidia.com/H100, mode: Passthrough, maxCount: 8}
//! status: {allocatableUnits: 8, freeUnits: 8, largestFreeOnNode: 8}
//! "#, "cozy-gpuclaim").unwrap();
//! let review = serde_json::json!({
//!     "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
//!     "request": {
//!         "uid": "1", "operation": "CREATE", "namespace": "tenant-a", "name": "train",
//!         "kind": {"group": "gpu.cozystack.io", "version": "v1alpha1", "kind": "GPUClaim"},
//!         "resource": {"group": "gpu.cozystack.io", "version": "v1alpha1", "resource": "gpuclaims"},
//!         "userInfo": {"username": "alice"},
//!         "object": {"apiVersion": "gpu.cozystack.io/v1alpha1", "kind": "GPUClaim",
//!                    "metadata": {"name": "train", "namespace": "tenant-a"},
//!                    "spec": {"className": "h100", "count": 9}}
//!     }
//! });
//! let (response, outcome) = answer_review(&objects.view, &review).unwrap();
//! assert_eq!(response["response"]["allowed"], false);
//! assert_eq!(outcome.refusal, Some("CountOverMax"));
//! ```

pub mod api;
pub mod controller;
pub mod convert;
pub mod fixtures;
pub mod keys;
pub mod message;
pub mod model;
pub mod name;
pub mod objects;
pub mod quantity;
pub mod references;
pub mod review;
pub mod rules;
pub mod scheduling;
pub mod variant;
pub mod yaml;
