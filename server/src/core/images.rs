//! Images made ready ahead of the tasks that need them (`PrefetchImages`), and the pools a
//! task schedule keeps (`SetPoolTargets`): the neutral words both backends report in.

use crate::core::failure::FailureKind;
use crate::error::ProviderError;

/// Images one `PrefetchImages` may name.
pub const MAX_IMAGES: usize = 64;

/// Where one image stands on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageState {
    /// The node had it already (final).
    Present,
    /// Being pulled from its registry.
    Pulling,
    /// Being copied from another node.
    Copying,
    /// Pulled or copied (final).
    Ready,
    /// The node could not get it (final).
    Failed,
}

impl ImageState {
    pub fn is_final(self) -> bool {
        matches!(self, ImageState::Present | ImageState::Ready | ImageState::Failed)
    }
}

/// One step of one image on one node.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageProgress {
    pub image: String,
    pub node: String,
    pub state: ImageState,
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// The node copied from, or [`REGISTRY`] for a pull.
    pub source: String,
    pub error: String,
    pub failure_kind: Option<FailureKind>,
}

/// The node name one host reports its steps (and pool shares) under.
pub const ONE_HOST: &str = "local";

/// `source` of a pull.
pub const REGISTRY: &str = "registry";

impl ImageProgress {
    pub fn new(image: &str, node: &str, state: ImageState) -> Self {
        Self {
            image: image.to_string(),
            node: node.to_string(),
            state,
            bytes_done: 0,
            bytes_total: 0,
            source: String::new(),
            error: String::new(),
            failure_kind: None,
        }
    }

    pub fn failed(image: &str, node: &str, error: impl Into<String>, kind: FailureKind) -> Self {
        Self { error: error.into(), failure_kind: Some(kind), ..Self::new(image, node, ImageState::Failed) }
    }

    pub fn from(mut self, source: &str) -> Self {
        self.source = source.to_string();
        self
    }

    pub fn bytes(mut self, done: u64, total: u64) -> Self {
        self.bytes_done = done;
        self.bytes_total = total;
        self
    }
}

/// Where a backend sends the steps of a prefetch (the call's stream).
pub type ImageSink = tokio::sync::mpsc::Sender<ImageProgress>;

/// A `PrefetchImages` request's images: 1..=[`MAX_IMAGES`], each a valid image reference,
/// none twice (`docker://` dropped).
pub fn check_images(images: &[String]) -> Result<Vec<String>, ProviderError> {
    if images.is_empty() || images.len() > MAX_IMAGES {
        return Err(ProviderError::invalid(
            "images",
            format!("must name 1 to {MAX_IMAGES} images (got {})", images.len()),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(images.len());
    for (i, image) in images.iter().enumerate() {
        crate::core::spec::validate_image(image)
            .map_err(|_| ProviderError::invalid(format!("images[{i}]"), bad_image(image)))?;
        let image = crate::core::spec::normalize_image(image).to_string();
        if out.contains(&image) {
            return Err(ProviderError::invalid(format!("images[{i}]"), format!("{image:?} is named twice")));
        }
        out.push(image);
    }
    Ok(out)
}

fn bad_image(image: &str) -> String {
    format!("{image:?} is not an image reference (non-empty, no leading '-', no whitespace)")
}

/// The pool `SetPoolTargets` keys by `image` when the caller names none: `img-` and the image,
/// lower case, characters outside `[a-z0-9_.-]` made `-`, at most 63 characters.
pub fn pool_name_for(image: &str) -> String {
    let image = crate::core::spec::normalize_image(image);
    let mut name = String::from("img-");
    name.extend(image.chars().map(|c| {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.' || c == '-' {
            c
        } else {
            '-'
        }
    }));
    name.truncate(63);
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_checked_and_named_pools_fit_the_pool_name_rules() {
        assert!(check_images(&[]).is_err());
        let e = check_images(&["ok:1".into(), "-x".into()]).unwrap_err().to_string();
        assert!(e.contains("images[1]"), "{e}");
        let e = check_images(&["a:1".into(), "docker://a:1".into()]).unwrap_err().to_string();
        assert!(e.contains("twice"), "{e}");
        assert_eq!(check_images(&["docker://a:1".into()]).unwrap(), vec!["a:1".to_string()]);
        assert_eq!(pool_name_for("Reg:5000/Team/Img:1"), "img-reg-5000-team-img-1");
        let long = pool_name_for(&"a".repeat(100));
        assert_eq!(long.len(), 63);
        crate::core::pools::rules::check_name("pool", &long).unwrap();
        crate::core::pools::rules::check_name("pool", &pool_name_for("sandboxd-test/busybox:1")).unwrap();
    }
}
