"""Device-side batch transforms: image augmentation, array interop and table preprocessing."""
