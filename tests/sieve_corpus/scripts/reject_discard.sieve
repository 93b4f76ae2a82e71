require "reject";
discard;
reject "discard then reject";
