set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/quality/stories260K-indomain/ppl_text.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (text)'
set title 'stories260K'
plot 4.0076044694179735 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-cov', '-' using 1:2 with linespoints title 'asvd-hessian', '-' using 1:2 with linespoints title 'asvd-l1', '-' using 1:2 with linespoints title 'asvd-l2', '-' using 1:2 with linespoints title 'asvd-rootcov', '-' using 1:2 with linespoints title 'latentllm', '-' using 1:2 with linespoints title 'plain-svd'
10 6.462108765874845
20 15.811906810530752
30 37.97122210147522
40 74.52691091374618
e
10 6.362385640176479
20 16.649707938128472
30 86.62192222758227
40 277.658917006484
e
10 6.393715574253667
20 18.114833990404467
30 91.2701484428964
40 286.95701753338847
e
10 6.36000591214816
20 17.71874813742253
30 87.72187071800691
40 207.499849451821
e
10 5.702053653778364
20 11.836390761616808
30 31.49069808909341
40 76.28208893401526
e
10 5.2979365944879
20 8.975708470338768
30 17.056005820956063
40 33.20846091073779
e
10 6.595678982952402
20 21.92600519423505
30 99.67492696135682
40 368.31244711096
e
