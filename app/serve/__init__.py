"""Process plumbing: one worker's parts, granian, the data folder's lock, the built-in
model's supervisor process."""
