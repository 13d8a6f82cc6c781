"""What a layer's attention does with positions: layer types, masks, position biases, query scale, mask engines."""
