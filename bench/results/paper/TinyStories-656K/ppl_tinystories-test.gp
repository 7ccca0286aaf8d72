set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/TinyStories-656K/ppl_tinystories-test.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-test)'
set title 'TinyStories-656K'
plot 27.733049124048073 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-cov', '-' using 1:2 with linespoints title 'asvd-hessian', '-' using 1:2 with linespoints title 'asvd-l1', '-' using 1:2 with linespoints title 'asvd-l2', '-' using 1:2 with linespoints title 'asvd-rootcov', '-' using 1:2 with linespoints title 'latentllm', '-' using 1:2 with linespoints title 'plain-svd'
10 67.50996765166126
20 95.47138284767396
30 142.1388553651107
40 210.33950686131413
e
10 72.24103112103953
20 108.05200744866468
30 177.65141061486358
40 320.8398525176357
e
10 68.80447920213895
20 97.0900736414839
30 148.04475527145527
40 236.69018828584996
e
10 67.1896994040462
20 100.57039400504948
30 150.21246854007794
40 238.9505813863191
e
10 56.32374439578635
20 79.54080861965922
30 117.38241859221289
40 172.03744785729253
e
10 31.67512408457739
20 41.911305770233966
30 66.19609250861673
40 111.70564865730938
e
10 78.8898369203056
20 109.10618344731792
30 176.66710079884504
40 293.26200786453586
e
