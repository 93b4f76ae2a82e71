require "fileinto";
if size :over 500 { fileinto "Big"; }
if size :under 300 { fileinto "Small"; }
if size :over 1K { fileinto "Kilo"; }
