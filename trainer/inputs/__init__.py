"""What a model sees: image folders and their decoded cache, augmentation, and demo input features."""
