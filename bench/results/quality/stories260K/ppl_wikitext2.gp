set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/quality/stories260K/ppl_wikitext2.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (wikitext2)'
set title 'stories260K'
plot 122.33439962946689 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-cov', '-' using 1:2 with linespoints title 'asvd-hessian', '-' using 1:2 with linespoints title 'asvd-l1', '-' using 1:2 with linespoints title 'asvd-l2', '-' using 1:2 with linespoints title 'asvd-rootcov', '-' using 1:2 with linespoints title 'latentllm', '-' using 1:2 with linespoints title 'plain-svd'
10 120.37863428195651
20 134.7192586106857
30 155.81556379199628
40 169.50297645956198
e
10 169.49807887715252
20 338.12473714038055
30 649.0922010537927
40 1029.1994007268677
e
10 156.3236337824555
20 329.4302040571282
30 575.1793806524539
40 907.9181093365446
e
10 157.99441391615827
20 296.5404802567318
30 494.12569112303686
40 553.6869331483277
e
10 123.92382389356186
20 131.58216094010345
30 157.749318365161
40 191.62438151142229
e
10 123.42134593282033
20 116.64920120467227
30 127.86099496598364
40 130.8293833216505
e
10 171.15104210098374
20 421.0664248653216
30 726.488386166627
40 1275.2325003993171
e
